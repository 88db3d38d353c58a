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

func TestBuildVersionCommitSetAtLinkTime(t *testing.T) {
	recorded := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "eb7f872ba5cc72840ab3d2f25faff32a6e0dc6ad"}}}
	none := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}
	for _, tt := range []struct {
		name            string
		version, commit string
		bi              *debug.BuildInfo
		want            string
	}{
		{"no commit recorded", "v0.1.0", "c6fe70e1a2b3c4d5e6f7", none, "v0.1.0 (commit c6fe70e1a2b3, go1.26.8)"},
		{"no commit recorded, no version", "", "c6fe70e1a2b3c4d5e6f7", none, "c6fe70e1a2b3 (commit c6fe70e1a2b3, go1.26.8)"},
		{"Go's record wins", "v0.1.0", "c6fe70e1a2b3c4d5e6f7", recorded, "v0.1.0 (commit eb7f872ba5cc, go1.26.8)"},
		{"none set", "", "", none, "devel (go1.26.8)"},
	} {
		if got := buildVersion(tt.version, withCommit(tt.bi, tt.commit)); got != tt.want {
			t.Errorf("%s: buildVersion = %q; want %q", tt.name, got, tt.want)
		}
	}
	if len(none.Settings) != 0 {
		t.Error("withCommit changed the build info it was given")
	}
}
