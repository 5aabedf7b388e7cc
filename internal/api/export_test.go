package api

// TakeReadSlot takes one of the API's database read slots until the returned func is called.
func (a *API) TakeReadSlot() (release func()) {
	a.slots <- struct{}{}
	return func() { <-a.slots }
}
