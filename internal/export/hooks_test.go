package export

// AfterCount returns o with f run once the day's rows are counted, before any file is written:
// what a writer committing meanwhile does to an export.
func AfterCount(o Options, f func()) Options {
	o.afterCount = f
	return o
}

// AfterTable returns o with f run once each table's file is written, before any is in place:
// what a stop, a kill or a full disk in the middle of a day does to its export.
func AfterTable(o Options, f func()) Options {
	o.afterTable = f
	return o
}

// BeforeLock returns o with f run once the day is judged to need writing, before its lock is
// taken: what another run finishing the day in between does.
func BeforeLock(o Options, f func()) Options {
	o.beforeLock = f
	return o
}
