package partition

// WhileDropLocked makes p run fn while its drop pass holds the lock (tests only).
func WhileDropLocked(p *Partitions, fn func()) { p.lockedForDrop = fn }
