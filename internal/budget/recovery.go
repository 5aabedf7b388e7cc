package budget

import "time"

// RecoveryFactor is the share of its budget a process may use while the provider has been
// RECOVERING for elapsed (package health decides when it is): floor at the start, rising
// linearly to all of it after over (daemon.health.recover_factor and recover_for), so a short
// outage on a small catalog ends in over, not after a number of collections a small catalog
// takes long to make.
func RecoveryFactor(floor float64, over, elapsed time.Duration) float64 {
	if over <= 0 {
		return 1
	}
	return min(floor+(1-floor)*float64(max(elapsed, 0))/float64(over), 1)
}
