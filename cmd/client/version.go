package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// module is agentsilo's module path.
const module = "github.com/agentsilo/agentsilo"

// buildVersion is what `client version` prints: the build information the
// Go toolchain embedded in the binary.
type buildVersion struct {
	Version  string `json:"version"`            // agentsilo's: a tag, a pseudo-version, or "(devel)" from a checkout
	Revision string `json:"revision,omitempty"` // VCS revision, if the build recorded one (only for a build of agentsilo's own module)
	Time     string `json:"time,omitempty"`     // the revision's commit time
	Modified bool   `json:"modified,omitempty"` // the work tree had changes
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// versionOf reads bi (nil: no build information). The client may be built
// from agentsilo's module or, as a dependency, from another's (`go run
// github.com/agentsilo/agentsilo/cmd/client` in a module of one's own
// agents); then agentsilo's version is that dependency's, and the VCS
// revision, which is the other module's, is left out.
func versionOf(bi *debug.BuildInfo) buildVersion {
	v := buildVersion{Version: "unknown", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		return v
	}
	v.Go, v.Version = bi.GoVersion, ""
	own := bi.Main.Path == module
	if own {
		v.Version = bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == module {
			v.Version = d.Version
			if d.Replace != nil {
				v.Version += " (replaced by " + d.Replace.Path + ")"
			}
		}
	}
	if v.Version == "" {
		v.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		if !own {
			break
		}
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// String is the text form, one line in the shape of `silo --version`:
// `client VERSION [REVISION] GOVERSION`.
func (v buildVersion) String() string {
	parts := []string{"client", v.Version}
	if v.Revision != "" {
		parts = append(parts, v.Revision)
	}
	return strings.Join(append(parts, v.Go), " ") + "\n"
}

// cmdVersion runs version and --version.
func cmdVersion(g *globals, name string, args []string) error {
	pos, err := parse(newFlagSet(name, g), args)
	if err != nil {
		return err
	}
	if err := noArgs(name, pos); err != nil {
		return err
	}
	if err := g.checkOutput(); err != nil {
		return err
	}
	bi, _ := debug.ReadBuildInfo()
	v := versionOf(bi)
	if g.output == "json" {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "%s\n", b)
		return nil
	}
	fmt.Fprint(g.stdout, v)
	return nil
}
