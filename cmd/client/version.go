package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// buildVersion is what `client version` prints: the build information the
// Go toolchain embedded in the binary.
type buildVersion struct {
	Module   string `json:"module"`
	Version  string `json:"version"`            // "v0.1.0", or "(devel)" for a build from a work tree
	Revision string `json:"revision,omitempty"` // VCS revision, if the build recorded it
	Time     string `json:"time,omitempty"`     // the revision's commit time
	Modified bool   `json:"modified,omitempty"` // the work tree had changes
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// versionOf reads bi (nil: no build information).
func versionOf(bi *debug.BuildInfo) buildVersion {
	v := buildVersion{Version: "unknown", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		return v
	}
	v.Module, v.Version, v.Go = bi.Main.Path, bi.Main.Version, bi.GoVersion
	if v.Version == "" {
		v.Version = "(devel)"
	}
	for _, s := range bi.Settings {
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

// String is the text form:
//
//	agentsilo client v0.1.0
//	revision 5189f89c... (2026-11-21T10:00:00Z, modified)
//	go1.26.8 linux/amd64
func (v buildVersion) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "agentsilo client %s\n", v.Version)
	if v.Revision != "" {
		var notes []string
		if v.Time != "" {
			notes = append(notes, v.Time)
		}
		if v.Modified {
			notes = append(notes, "modified")
		}
		fmt.Fprintf(&b, "revision %s", v.Revision)
		if len(notes) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(notes, ", "))
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "%s %s\n", v.Go, v.Platform)
	return b.String()
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
