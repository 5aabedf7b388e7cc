// Package configs embeds the demo's import targets, so `collector-dev demo` works from any
// directory; a configs/import-targets.yaml on disk still wins.
package configs

import _ "embed"

// ImportTargetsPath is where the embedded targets live in the repository.
const ImportTargetsPath = "configs/import-targets.yaml"

// ImportTargets is configs/import-targets.yaml as built into the binary.
//
//go:embed import-targets.yaml
var ImportTargets []byte
