package export

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
)

// LockName is the file a day's directory is locked through; hidden, like the temporary files,
// from a reader globbing the day's tables.
const LockName = ".export.lock"

// lockDir takes the day's directory for this run. Two exporters on one day (replicas sharing a
// volume, a CronJob beside the daemon) would remove each other's manifest and temporary files
// and list hashes of files the other renamed in. It is flock(2), let go when the process ends,
// however it ends, so a killed exporter never leaves the day locked (only the file, which the
// next run takes and removes). busy: another run holds it. A directory this run cannot make or
// write in is not locked: it can only keep what is there, and writable says why when it must
// write.
func lockDir(dir string) (unlock func(), busy bool) {
	_ = os.MkdirAll(dir, 0o755)
	path := filepath.Join(dir, LockName)
	for attempt := 1; ; attempt++ {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if errors.Is(err, os.ErrPermission) {
			// Left by a run as another user (root beside the service's own): flock needs no
			// write access, and skipping the lock would let the two runs undo each other.
			f, err = os.Open(path)
		}
		if err != nil {
			return func() {}, false
		}
		lockErr := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		// The run before may have removed the file between our open and our lock: a lock on
		// (or an error from) a removed file says nothing, so judge the file at the path.
		held, err1 := f.Stat()
		now, err2 := os.Stat(path)
		same := err1 == nil && err2 == nil && os.SameFile(held, now)
		switch {
		case lockErr == nil && same:
			return func() { _ = os.Remove(path); f.Close() }, false // removed while held
		case errors.Is(lockErr, syscall.EWOULDBLOCK):
			f.Close()
			return nil, true
		case !same && attempt < 3:
			f.Close()
		case !same:
			f.Close()
			return nil, true // replaced under us again and again: others are at work
		default:
			// A file system without locks: as before there were any, and no file left behind.
			f.Close()
			return func() { _ = os.Remove(path) }, false
		}
	}
}
