package cli

import (
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/snapflip/snapflip/snapshot"
)

// EnvCrashAt makes the syncer SIGKILL itself at a protocol point, for crash tests:
// "after-open", "mid-write@<rows>", "after-seal", "after-flip", "rollback-flip".
// Never set it in production.
const EnvCrashAt = "SNAPFLIP_CRASH_AT"

// crashHook returns the hook SNAPFLIP_CRASH_AT asks for, or nil.
func crashHook(getenv func(string) string) func(snapshot.CrashPoint, int64) {
	spec := getenv(EnvCrashAt)
	if spec == "" {
		return nil
	}
	point, after, _ := strings.Cut(spec, "@")
	rows, _ := strconv.ParseInt(after, 10, 64)
	return func(at snapshot.CrashPoint, n int64) {
		if string(at) == point && n >= rows {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
}
