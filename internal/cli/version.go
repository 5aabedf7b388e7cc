package cli

import (
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Set by SetBuild from the main package's linker-set values. Left empty by a plain `go build` /
// `go install`, when the module and VCS information Go embeds is used instead.
var version, commit, buildDate string

// SetBuild records what the linker wrote into the main package: go build -ldflags "-X
// main.version=… -X main.commit=… -X main.buildDate=…" (see Makefile LDFLAGS and the Dockerfile).
func SetBuild(ver, rev, date string) { version, commit, buildDate = ver, rev, date }

func newVersionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and build date",
		Args:  cobra.NoArgs,
		// No config load: version must work without a database or a valid config.
		RunE: func(*cobra.Command, []string) error {
			v, c, d := buildInfo()
			a.printf("collector %s\ncommit:     %s\nbuilt:      %s\ngo:         %s %s/%s\n", v, c, d, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}

// buildInfo prefers the linker-set values and falls back to what the Go toolchain embedded.
func buildInfo() (ver, rev, date string) {
	ver, rev, date = version, commit, buildDate
	if bi, ok := debug.ReadBuildInfo(); ok {
		if ver == "" && bi.Main.Version != "" {
			ver = bi.Main.Version // "(devel)" for a build inside the checkout
		}
		dirty := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if rev == "" {
					rev = s.Value
				}
			case "vcs.time":
				if date == "" {
					date = s.Value
				}
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty && commit == "" && rev != "" {
			rev += "-dirty"
		}
	}
	for _, p := range []*string{&ver, &rev, &date} {
		if *p == "" {
			*p = "unknown"
		}
	}
	return ver, rev, date
}
