package main

import (
	"os"
	"testing"

	"github.com/snapflip/snapflip/internal/testenv"
)

func TestMain(m *testing.M) { testenv.MainOrTests(m, main) }

// TestExitStatusAndMessages runs the command's main, in this test binary, as a
// process: help on stdout with exit status 0, usage mistakes with 2, failures with 1,
// and every error printed once on stderr as one line "syncer: ..." ending in a newline.
func TestExitStatusAndMessages(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	testenv.CheckInvocations(t, bin, "syncer", []testenv.Invocation{
		{Args: []string{"--help"}, Code: 0, Stdout: "syncer once --config snapflip.yaml", Stderr: ""},
		{Args: []string{"once", "-h"}, Code: 0, Stdout: "syncer once --config snapflip.yaml", Stderr: ""},
		{Args: []string{"help", "rollback"}, Code: 0, Stdout: "syncer rollback --previous", Stderr: ""},
		{Args: []string{"version"}, Code: 0, Stdout: "syncer ", Stderr: ""},
		{Args: []string{"--version"}, Code: 0, Stdout: "syncer ", Stderr: ""},
		{Args: []string{"completion", "bash"}, Code: 0, Stdout: "bash completion", Stderr: ""},
		{Args: []string{"once", "--nope"}, Code: 2, Stdout: "", Stderr: "syncer: usage: unknown flag: --nope; see 'syncer once --help'\n"},
		{Args: []string{"onse"}, Code: 2, Stdout: "", Stderr: `syncer: usage: unknown command "onse" (did you mean once?)`},
		{Args: []string{"once", "extra"}, Code: 2, Stdout: "", Stderr: "once takes no arguments"},
		{Args: []string{"history", "--limit", "many"}, Code: 2, Stdout: "", Stderr: `"many"`},
		{Args: []string{}, Code: 2, Stdout: "", Stderr: "no command given"},
		{Args: []string{"once", "--config", "/nonexistent/snapflip.yaml"}, Code: 1, Stdout: "", Stderr: "syncer: config: open /nonexistent/snapflip.yaml: no such file or directory\n"},
	})
}
