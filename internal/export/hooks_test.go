package export

// AfterCount returns o with f run once the day's rows are counted, before any file is written:
// what a writer committing meanwhile does to an export.
func AfterCount(o Options, f func()) Options {
	o.afterCount = f
	return o
}
