package store_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The Bigtable store depends on the domain alone: of this module's packages it
// imports snapshot, index and internal/retry, never the layer engine or the read
// side, whose storage interfaces internal/storetest checks it against. The
// in-memory store adds this package (its leases are this package's).
func TestStoreDependsOnTheDomainOnly(t *testing.T) {
	for _, pkg := range []string{".", "../internal/memstore"} {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		self := strings.TrimSpace(mustOutput(t, "go", "list", pkg))
		allowed := []string{self, "github.com/snapflip/snapflip/snapshot", "github.com/snapflip/snapflip/index",
			"github.com/snapflip/snapflip/internal/retry", "github.com/snapflip/snapflip/store"}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, "github.com/snapflip/snapflip/") && !slices.Contains(allowed, dep) {
				t.Errorf("%s depends on %s; want only the domain's packages %v", self, dep, allowed[1:])
			}
		}
	}
}

func mustOutput(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return string(out)
}
