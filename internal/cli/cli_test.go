package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapflip/snapflip/internal/testenv"
)

// run runs the syncer (or, with api, the metadata API) in-process with args and the
// environment getenv, and returns its stdout, stderr and error.
func run(tb testing.TB, api bool, getenv func(string) string, args ...string) (stdout, stderr string, err error) {
	tb.Helper()
	var out, errOut bytes.Buffer
	if getenv == nil {
		getenv = env(nil)
	}
	if api {
		err = (&MetadataAPI{Getenv: getenv, Stdout: &out, Stderr: &errOut}).Run(context.Background(), args)
	} else {
		err = (&Syncer{Getenv: getenv, Stdout: &out, Stderr: &errOut}).Run(context.Background(), args)
	}
	return out.String(), errOut.String(), err
}

// TestSyncerFlagsBeforeOrAfterTheCommand: the flags of every command and the global
// ones may come before or after the command, in any mix, against a real Postgres and
// Bigtable emulator.
func TestSyncerFlagsBeforeOrAfterTheCommand(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE things (id text PRIMARY KEY, n int)`, `INSERT INTO things VALUES ('a', 1), ('b', 2)`)
	getenv := env(map[string]string{EnvPostgresDSN: dsn, EnvEmulatorHost: testenv.Bigtable(t)})
	config := filepath.Join(t.TempDir(), "snapflip.yaml")
	if err := os.WriteFile(config, []byte("dataset: cli\ncollections: [{name: things, table: public.things, key: id}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"once", "--config", config, "--log-level", "warn"}, "published"},                      // after
		{[]string{"--config", config, "--log-level", "warn", "once"}, "unchanged"},                      // before
		{[]string{"--log-level=warn", "once", "--config=" + config, "--force"}, "published"},            // mixed
		{[]string{"--force", "--config", config, "once", "--log-format", "json"}, "published"},          // once's flag before it
		{[]string{"versions", "--json", "--config", config}, `"state": "published"`},                    // an admin command
		{[]string{"--config", config, "history", "--limit", "1", "--log-level", "warn"}, "flip"},        // both sides
		{[]string{"rollback", "--config", config, "--previous", "--reason", "test"}, "rolled back"},     // several flags after
		{[]string{"--config", config, "unpin", "--reason", "test", "--log-format=json"}, "unpinned"},    // both sides
		{[]string{"once", "--metrics-addr", "127.0.0.1:0", "--config", config, "--force"}, "published"}, // --metrics-addr after
	} {
		out, _, err := run(t, false, getenv, tt.args...)
		if err != nil || !strings.Contains(out, tt.want) {
			t.Errorf("syncer %q = %q, %v; want %q in the output", tt.args, out, err, tt.want)
		}
	}
}

// TestHelp: --help, -h and `help CMD` print the command's help, with its example, on
// stdout, and succeed.
func TestHelp(t *testing.T) {
	for _, tt := range []struct {
		api  bool
		args []string
		want string // a line of the example
	}{
		{false, []string{"--help"}, "syncer once --config snapflip.yaml"},
		{false, []string{"-h"}, "syncer once --config snapflip.yaml"},
		{false, []string{"help"}, "syncer once --config snapflip.yaml"},
		{false, []string{"once", "--help"}, "syncer once --config snapflip.yaml"},
		{false, []string{"once", "-h"}, "syncer once --config snapflip.yaml"},
		{false, []string{"-h", "once"}, "syncer once --config snapflip.yaml"},
		{false, []string{"help", "once"}, "syncer once --config snapflip.yaml"},
		{false, []string{"--config", "x.yaml", "run", "--help"}, "syncer run --config /etc/snapflip/snapflip.yaml"},
		{false, []string{"help", "rollback"}, `syncer rollback --previous --reason "bad import"`},
		{false, []string{"diff", "--help"}, "syncer diff 7b1e4c1a-"},
		{false, []string{"help", "completion"}, "syncer completion bash"},
		{true, []string{"--help"}, "metadata-api --addr :8080"},
		{true, []string{"-h"}, "metadata-api --addr :8080"},
	} {
		out, errOut, err := run(t, tt.api, nil, tt.args...)
		if err != nil || !strings.Contains(out, tt.want) || !strings.Contains(out, "Usage:") || errOut != "" {
			t.Errorf("%q = stdout %q, stderr %q, %v; want the help with %q on stdout", tt.args, out, errOut, err, tt.want)
		}
	}
}

// TestUsageErrors: command-line mistakes are usage errors (exit status 2) that name the
// problem.
func TestUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		api  bool
		args []string
		want []string
	}{
		{false, []string{"onse", "--config", "x.yaml"}, []string{`unknown command "onse"`, "did you mean once?"}},
		{false, []string{"--config", "x.yaml"}, []string{"no command given", "once"}},
		{false, []string{"once", "--nope"}, []string{"unknown flag: --nope", "syncer once --help"}},
		{false, []string{"--nope", "once"}, []string{"unknown flag: --nope", "--help"}},
		{false, []string{"versions", "--force"}, []string{"--force"}},
		{false, []string{"history", "--limit", "many"}, []string{`"many"`, "--limit"}},
		{false, []string{"once", "--log-level", "loud"}, []string{`"loud"`, "--log-level"}},
		{false, []string{"once", "extra"}, []string{"once takes no arguments", "extra"}},
		{false, []string{"inspect"}, []string{"inspect wants 1 argument"}},
		{false, []string{"diff", "7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1"}, []string{"diff wants 2 argument"}},
		{false, []string{"inspect", "not-a-version"}, []string{`"not-a-version"`}},
		{false, []string{"rollback", "--to", "not-a-version", "--reason", "x"}, []string{`"not-a-version"`, "--to"}},
		{false, []string{"help", "nosuch"}, []string{`unknown help topic "nosuch"`}},
		{false, []string{"completion", "tcsh"}, []string{`unknown shell "tcsh"`}},
		{true, []string{"--nope"}, []string{"unknown flag: --nope", "metadata-api --help"}},
		{true, []string{"serve"}, []string{"takes no arguments", "serve"}},
		{true, []string{"--cache-size", "lots"}, []string{`"lots"`, "--cache-size"}},
	} {
		out, _, err := run(t, tt.api, nil, tt.args...)
		if !errors.Is(err, ErrUsage) {
			t.Errorf("%q = %v; want a usage error", tt.args, err)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q = %v; want it to say %q", tt.args, err, w)
			}
		}
		if out != "" {
			t.Errorf("%q wrote %q to stdout; want nothing", tt.args, out)
		}
	}
}

// TestEnvErrorsNameTheVariable: a malformed environment value behind a syncer flag is
// a usage error naming the variable, and a flag given on the command line wins over
// the variable.
func TestEnvErrorsNameTheVariable(t *testing.T) {
	bad := env(map[string]string{EnvLogFormat: "xml", EnvConfig: "/nonexistent/snapflip.yaml"})
	if _, _, err := run(t, false, bad, "once"); !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), EnvLogFormat) {
		t.Errorf("%s=xml: %v; want a usage error naming %s", EnvLogFormat, err, EnvLogFormat)
	}
	_, _, err := run(t, false, bad, "once", "--log-format", "json")
	if err == nil || errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "/nonexistent/snapflip.yaml") {
		t.Errorf("with --log-format given: %v; want the flag to win and the config from %s to be read", err, EnvConfig)
	}
}

// TestVersion: `syncer version`, `syncer --version` and `metadata-api --version` print
// the program's name and the build's version.
func TestVersion(t *testing.T) {
	for _, tt := range []struct {
		api  bool
		args []string
		want string
	}{
		{false, []string{"version"}, "syncer "},
		{false, []string{"--version"}, "syncer "},
		{true, []string{"--version"}, "metadata-api "},
	} {
		out, _, err := run(t, tt.api, nil, tt.args...)
		if err != nil || !strings.HasPrefix(out, tt.want) || !strings.Contains(out, "go1.") || !strings.HasSuffix(out, ")\n") {
			t.Errorf("%q = %q, %v; want %q, a version and the Go version", tt.args, out, err, tt.want)
		}
	}
}

// TestCompletion: both binaries print completion scripts for every shell cobra knows.
func TestCompletion(t *testing.T) {
	for _, api := range []bool{false, true} {
		prog := map[bool]string{false: "syncer", true: "metadata-api"}[api]
		for shell, want := range map[string]string{
			"bash":       "# bash completion V2 for " + prog,
			"zsh":        "#compdef " + prog,
			"fish":       "# fish completion for " + prog,
			"powershell": "# powershell completion for " + prog,
		} {
			out, _, err := run(t, api, nil, "completion", shell)
			if err != nil || !strings.Contains(out, want) {
				t.Errorf("%s completion %s = %.200q, %v; want a script starting %q", prog, shell, out, err, want)
			}
		}
	}
}
