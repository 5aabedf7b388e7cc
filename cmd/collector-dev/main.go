// Command collector-dev is collector plus the project's development tools: `demo`, the main job
// on an embedded default (local PostgreSQL via devpg, the built-in simulator, in-process Kafka),
// and `sim`, the simulated Neople API. Every other command is the shipped collector's own.
package main

import "github.com/duecollector/duecollector/internal/cli"

// tree is the shipped tree plus the development commands.
var tree = cli.Tree{Name: "collector-dev", Extra: []cli.Extension{newDemoCmd, newSimCmd}}

// Set by the linker, as collector's are.
var version, commit, buildDate string

func main() {
	cli.SetBuild(version, commit, buildDate)
	tree.Main()
}
