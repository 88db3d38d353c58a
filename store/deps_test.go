package store_test

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// The Bigtable store depends on the domain alone: of this module's packages it
// imports snapshot, index and internal/retry, never the layer engine or the read
// side, whose storage interfaces internal/storetest checks it against. The
// in-memory store adds this package (its leases are this package's).
func TestStoreDependsOnTheDomainOnly(t *testing.T) {
	for _, pkg := range []string{".", "../internal/memstore"} {
		out, err := goCommand(t, "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		self := strings.TrimSpace(mustOutput(t, "list", pkg))
		allowed := []string{self, "github.com/snapflip/snapflip/snapshot", "github.com/snapflip/snapflip/index",
			"github.com/snapflip/snapflip/internal/retry", "github.com/snapflip/snapflip/store"}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, "github.com/snapflip/snapflip/") && !slices.Contains(allowed, dep) {
				t.Errorf("%s depends on %s; want only the domain's packages %v", self, dep, allowed[1:])
			}
		}
	}
}

// goCommand is the go command with args, ended within two minutes.
func goCommand(t *testing.T, args ...string) *exec.Cmd {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return exec.CommandContext(ctx, "go", args...)
}

func mustOutput(t *testing.T, args ...string) string {
	t.Helper()
	out, err := goCommand(t, args...).Output()
	if err != nil {
		t.Fatalf("go %v: %v", args, err)
	}
	return string(out)
}
