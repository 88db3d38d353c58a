package cli

import (
	"runtime/debug"
	"testing"
)

func TestBuildVersion(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	for _, tt := range []struct {
		name     string
		override string
		bi       *debug.BuildInfo
		want     string
	}{
		{"tagged", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.4.0"},
			Settings: vcs("c6fe70e1a2b3c4d5e6f7", "false")}, "v1.4.0 (commit c6fe70e1a2b3, go1.26.8)"},
		{"pseudo-version of a modified tree", "", &debug.BuildInfo{GoVersion: "go1.26.8",
			Main:     debug.Module{Version: "v0.0.0-20261122005823-eb7f872ba5cc+dirty"},
			Settings: vcs("eb7f872ba5cc72840ab3d2f25faff32a6e0dc6ad", "true")},
			"v0.0.0-20261122005823-eb7f872ba5cc+dirty (commit eb7f872ba5cc, modified, go1.26.8)"},
		{"revision only", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: vcs("eb7f872ba5cc72840ab3d2f25faff32a6e0dc6ad", "true")}, "eb7f872ba5cc-dirty (commit eb7f872ba5cc, modified, go1.26.8)"},
		{"no version control", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "devel (go1.26.8)"},
		{"set at link time", "v2.0.0-rc1", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: vcs("eb7f872ba5cc72840ab3d2f25faff32a6e0dc6ad", "false")}, "v2.0.0-rc1 (commit eb7f872ba5cc, go1.26.8)"},
	} {
		if got := buildVersion(tt.override, tt.bi); got != tt.want {
			t.Errorf("%s: buildVersion = %q; want %q", tt.name, got, tt.want)
		}
	}
}
