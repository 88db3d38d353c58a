package testenv

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// EnvRunMain, when set, asks a command's test binary to be the command: its TestMain
// runs main instead of the tests (MainOrTests). CheckInvocations sets it.
const EnvRunMain = "SNAPFLIP_TEST_RUN_MAIN"

// MainOrTests is a command's TestMain: it runs main when the process was started with
// EnvRunMain set (CheckInvocations on the test binary itself), and the tests
// otherwise. The tests then run the command's own main as a process of its own,
// without building the command a second time.
func MainOrTests(m *testing.M, main func()) {
	if os.Getenv(EnvRunMain) != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Invocation is one run of a built binary and what it must do: exit with Code, and
// print Stdout and Stderr (substrings wanted in each).
type Invocation struct {
	Args           []string
	Code           int
	Stdout, Stderr string
}

// CheckInvocations runs the binary bin (named prog in its messages) once per
// invocation, with an environment empty but for HOME and EnvRunMain, and checks its exit status and output: an
// error is one line on stderr, "prog: ...\n"; a success prints nothing on stderr.
func CheckInvocations(tb testing.TB, bin, prog string, runs []Invocation) {
	tb.Helper()
	for _, tt := range runs {
		cmd := exec.Command(bin, tt.Args...)
		cmd.Env = []string{"HOME=" + tb.TempDir(), EnvRunMain + "=1"}
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			tb.Fatal(err)
		}
		if code != tt.Code || !strings.Contains(stdout.String(), tt.Stdout) || !strings.Contains(stderr.String(), tt.Stderr) {
			tb.Errorf("%s %q: exit %d, stdout %.300q, stderr %q; want exit %d, %q on stdout, %q on stderr",
				prog, tt.Args, code, stdout.String(), stderr.String(), tt.Code, tt.Stdout, tt.Stderr)
		}
		if e := stderr.String(); tt.Code != 0 && (!strings.HasPrefix(e, prog+": ") || !strings.HasSuffix(e, "\n") || strings.Count(e, "\n") != 1) {
			tb.Errorf("%s %q: stderr %q; want one line \"%s: ...\\n\"", prog, tt.Args, e, prog)
		}
		if tt.Code == 0 && stderr.Len() > 0 {
			tb.Errorf("%s %q: stderr %q; want nothing", prog, tt.Args, stderr.String())
		}
	}
}
