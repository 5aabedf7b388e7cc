package store

import "time"

// BoundSteps is boundSteps, for a test migrating its own steps.
var BoundSteps = boundSteps

// SetMigrationLockTimeout sets how long a migration step waits for a lock, for a test.
func SetMigrationLockTimeout(d time.Duration) (restore func()) {
	old := migrationLockTimeout
	migrationLockTimeout = d
	return func() { migrationLockTimeout = old }
}
