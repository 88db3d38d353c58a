package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/snapflip/snapflip/internal/testenv"
)

// TestExitStatusAndMessages runs the built binary: help on stdout with exit status 0,
// usage mistakes with 2, failures with 1, and every error printed once on stderr as one
// line "syncer: ..." ending in a newline.
func TestExitStatusAndMessages(t *testing.T) {
	bin := testenv.Build(t, "github.com/snapflip/snapflip/cmd/syncer")
	for _, tt := range []struct {
		args           []string
		code           int
		stdout, stderr string // wanted in each
	}{
		{[]string{"--help"}, 0, "syncer once --config snapflip.yaml", ""},
		{[]string{"once", "-h"}, 0, "syncer once --config snapflip.yaml", ""},
		{[]string{"help", "rollback"}, 0, "syncer rollback --previous", ""},
		{[]string{"version"}, 0, "syncer ", ""},
		{[]string{"--version"}, 0, "syncer ", ""},
		{[]string{"completion", "bash"}, 0, "bash completion", ""},
		{[]string{"once", "--nope"}, 2, "", "syncer: usage: unknown flag: --nope; see 'syncer once --help'\n"},
		{[]string{"onse"}, 2, "", `syncer: usage: unknown command "onse" (did you mean once?)`},
		{[]string{"once", "extra"}, 2, "", "once takes no arguments"},
		{[]string{"history", "--limit", "many"}, 2, "", `"many"`},
		{[]string{}, 2, "", "no command given"},
		{[]string{"once", "--config", "/nonexistent/snapflip.yaml"}, 1, "", "syncer: config: open /nonexistent/snapflip.yaml: no such file or directory\n"},
	} {
		cmd := exec.Command(bin, tt.args...)
		cmd.Env = []string{"HOME=" + t.TempDir()}
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tt.code || !strings.Contains(stdout.String(), tt.stdout) || !strings.Contains(stderr.String(), tt.stderr) {
			t.Errorf("syncer %q: exit %d, stdout %.300q, stderr %q; want exit %d, %q on stdout, %q on stderr",
				tt.args, code, stdout.String(), stderr.String(), tt.code, tt.stdout, tt.stderr)
		}
		if e := stderr.String(); tt.code != 0 && (!strings.HasPrefix(e, "syncer: ") || !strings.HasSuffix(e, "\n") || strings.Count(e, "\n") != 1) {
			t.Errorf("syncer %q: stderr %q; want one line \"syncer: ...\\n\"", tt.args, e)
		}
		if tt.code == 0 && stderr.Len() > 0 {
			t.Errorf("syncer %q: stderr %q; want nothing", tt.args, stderr.String())
		}
	}
}
