package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The shipped binary links what production runs: not the simulator, not the development
// database helper, not the development commands, not the tests' helpers (test signals are
// internal/testsignal, off and free in production).
func TestShipsNoDevelopmentCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, dev := range []string{"/internal/provider/neoplesim", "/internal/devpg", "/cmd/collector-dev", "/internal/testkit", "/storetest"} {
			if strings.Contains(pkg, dev) {
				t.Errorf("collector links %s", pkg)
			}
		}
	}
}
