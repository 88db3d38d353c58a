package cli

import (
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
)

// Version, when set at link time, is the version both binaries report instead of the
// one Go recorded in the build:
//
//	go build -ldflags "-X github.com/snapflip/snapflip/internal/cli.Version=v1.4.0" ./cmd/...
var Version string

// Commit, when set at link time, is the commit both binaries report if Go recorded none,
// as in the container images, whose build context leaves out .git:
//
//	go build -ldflags "-X github.com/snapflip/snapflip/internal/cli.Commit=$(git rev-parse HEAD)" ./cmd/...
var Commit string

// BuildVersion returns the version `syncer version`, `syncer --version` and
// `metadata-api --version` print: Version if set, else the main module's version as
// Go recorded it (a tag, or a pseudo-version with the commit and "+dirty"), else the
// commit; then, in parentheses, the commit, whether the work tree was modified, and
// the Go version.
func BuildVersion() string {
	bi, _ := debug.ReadBuildInfo()
	return buildVersion(Version, withCommit(bi, Commit))
}

// withCommit returns bi with commit as its vcs.revision if it records none.
func withCommit(bi *debug.BuildInfo, commit string) *debug.BuildInfo {
	if commit == "" {
		return bi
	}
	out := &debug.BuildInfo{}
	if bi != nil {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				return bi
			}
		}
		*out = *bi
		out.Settings = slices.Clone(bi.Settings)
	}
	out.Settings = append(out.Settings, debug.BuildSetting{Key: "vcs.revision", Value: commit})
	return out
}

func buildVersion(override string, bi *debug.BuildInfo) string {
	var rev, modified, goVersion string
	mainVersion := ""
	if bi != nil {
		goVersion, mainVersion = bi.GoVersion, bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
	}
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	version := override
	if version == "" && mainVersion != "" && mainVersion != "(devel)" {
		version = mainVersion
	}
	if version == "" && rev != "" {
		version = rev
		if modified == "true" {
			version += "-dirty"
		}
	}
	if version == "" {
		version = "devel"
	}
	var details []string
	if rev != "" {
		details = append(details, "commit "+rev)
		if modified == "true" {
			details = append(details, "modified")
		}
	}
	details = append(details, goVersion)
	return version + " (" + strings.Join(details, ", ") + ")"
}
