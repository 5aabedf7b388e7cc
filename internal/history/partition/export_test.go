package partition

import "time"

// WhileDropLocked makes p run fn while its drop pass holds the lock (tests only).
func WhileDropLocked(p *Partitions, fn func()) { p.lockedForDrop = fn }

// CreateLockKey is the advisory lock creators serialise on (tests only).
const CreateLockKey = createLockKey

// BoundDropIdle sets how long p's drop session may sit idle holding the lock (tests only).
func BoundDropIdle(p *Partitions, d time.Duration) { p.dropIdle = d }
