package main

import (
	"os"
	"testing"

	"github.com/snapflip/snapflip/internal/testenv"
)

func TestMain(m *testing.M) { testenv.MainOrTests(m, main) }

// TestExitStatusAndMessages runs the command's main, in this test binary, as a
// process: help on stdout with exit status 0, usage mistakes with 2, failures with 1,
// and every error printed once on stderr as one line "metadata-api: ..." ending in a newline.
func TestExitStatusAndMessages(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	testenv.CheckInvocations(t, bin, "metadata-api", []testenv.Invocation{
		{Args: []string{"--help"}, Code: 0, Stdout: "metadata-api --addr :8080", Stderr: ""},
		{Args: []string{"-h"}, Code: 0, Stdout: "metadata-api --addr :8080", Stderr: ""},
		{Args: []string{"--version"}, Code: 0, Stdout: "metadata-api ", Stderr: ""},
		{Args: []string{"completion", "zsh"}, Code: 0, Stdout: "#compdef metadata-api", Stderr: ""},
		{Args: []string{"--nope"}, Code: 2, Stdout: "", Stderr: "metadata-api: usage: unknown flag: --nope; see 'metadata-api --help'\n"},
		{Args: []string{"--cache-size", "lots"}, Code: 2, Stdout: "", Stderr: `"lots"`},
		{Args: []string{"serve"}, Code: 2, Stdout: "", Stderr: "takes no arguments"},
		// The default project "local" without BIGTABLE_EMULATOR_HOST: it stops and says why.
		{Args: []string{"--addr", "127.0.0.1:0", "--auth", "none"}, Code: 1, Stdout: "", Stderr: "BIGTABLE_EMULATOR_HOST"},
		// Serving without authentication is said, never reached by forgetting a flag.
		{Args: []string{"--addr", "127.0.0.1:0"}, Code: 2, Stdout: "", Stderr: "--auth (or SNAPFLIP_AUTH_CONFIG): give the auth file, or none"},
		{Args: []string{"--auth", "/nonexistent/auth.yaml"}, Code: 2, Stdout: "", Stderr: "/nonexistent/auth.yaml"},
	})
}
