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
// line "metadata-api: ..." ending in a newline.
func TestExitStatusAndMessages(t *testing.T) {
	bin := testenv.Build(t, "github.com/snapflip/snapflip/cmd/metadata-api")
	for _, tt := range []struct {
		args           []string
		code           int
		stdout, stderr string // wanted in each
	}{
		{[]string{"--help"}, 0, "metadata-api --addr :8080", ""},
		{[]string{"-h"}, 0, "metadata-api --addr :8080", ""},
		{[]string{"--version"}, 0, "metadata-api ", ""},
		{[]string{"completion", "zsh"}, 0, "#compdef metadata-api", ""},
		{[]string{"--nope"}, 2, "", "metadata-api: usage: unknown flag: --nope; see 'metadata-api --help'\n"},
		{[]string{"--cache-size", "lots"}, 2, "", `"lots"`},
		{[]string{"serve"}, 2, "", "takes no arguments"},
		// The default project "local" without BIGTABLE_EMULATOR_HOST: it stops and says why.
		{[]string{"--addr", "127.0.0.1:0"}, 1, "", "BIGTABLE_EMULATOR_HOST"},
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
			t.Errorf("metadata-api %q: exit %d, stdout %.300q, stderr %q; want exit %d, %q on stdout, %q on stderr",
				tt.args, code, stdout.String(), stderr.String(), tt.code, tt.stdout, tt.stderr)
		}
		if e := stderr.String(); tt.code != 0 && (!strings.HasPrefix(e, "metadata-api: ") || !strings.HasSuffix(e, "\n") || strings.Count(e, "\n") != 1) {
			t.Errorf("metadata-api %q: stderr %q; want one line \"metadata-api: ...\\n\"", tt.args, e)
		}
		if tt.code == 0 && stderr.Len() > 0 {
			t.Errorf("metadata-api %q: stderr %q; want nothing", tt.args, stderr.String())
		}
	}
}
