package partition

// WhileDropLocked makes p run fn while its drop pass holds the lock (tests only).
func WhileDropLocked(p *Partitions, fn func()) { p.lockedForDrop = fn }

// CreateLockKey is the advisory lock creators serialise on (tests only).
const CreateLockKey = createLockKey
