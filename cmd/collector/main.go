// Command collector keeps market data fresh: it collects each tracked item when the database
// says it is due, and relays the snapshots to Kafka. It links what production runs and nothing
// else; the simulator and the demo are cmd/collector-dev's.
package main

import "github.com/duecollector/duecollector/internal/cli"

// Set by the linker (Makefile LDFLAGS, Dockerfile).
var version, commit, buildDate string

func main() {
	cli.SetBuild(version, commit, buildDate)
	cli.Collector.Main()
}
