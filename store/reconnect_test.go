package store_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
)

// TestReconnectsPromptlyAfterALongOutage: after Bigtable has been unreachable for a
// while (reads failing all along, as the API's pointer refresher's do), the first read
// after it comes back on the same address succeeds within a couple of seconds. With
// gRPC's default reconnect backoff, which grows to two minutes, it took ten seconds
// and more: the API stayed not ready and the syncer's attempts failed long after
// Bigtable had recovered.
func TestReconnectsPromptlyAfterALongOutage(t *testing.T) {
	t.Parallel()
	addr, emu := testenv.StartEmulator(t)
	cfg := testenv.StoreConfig(addr)
	cfg.OpTimeout = 500 * time.Millisecond
	st := testenv.Store(t, cfg)
	ctx := context.Background()
	if err := st.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	_ = emu.Process.Kill()
	_ = emu.Wait()
	const outage = 20 * time.Second
	// Reads fail all through the outage, so that gRPC's reconnect backoff grows as
	// long as it may: the outage's length is what is under test.
	for down := time.Now(); time.Since(down) < outage; {
		if err := st.Ping(ctx); err == nil {
			t.Fatal("a read succeeded while Bigtable was down")
		}
	}
	host, port, _ := strings.Cut(addr, ":")
	back := exec.Command(testenv.EmulatorBinary(t), "-host", host, "-port", port)
	if err := back.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = back.Process.Kill(); _ = back.Wait() })
	restarted := time.Now()
	testenv.Eventually(t, 30*time.Second, func() error {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		// The restarted emulator is empty: "table not found" means it answered.
		if err := st.Ping(rctx); err != nil && !strings.Contains(err.Error(), "not found") {
			return fmt.Errorf("Bigtable still unreachable after it came back: %v", err)
		}
		return nil
	})
	took := time.Since(restarted)
	t.Logf("first successful read %s after Bigtable came back from a %s outage", took.Round(time.Millisecond), outage)
	if took > 3*time.Second {
		t.Errorf("the first successful read came %s after Bigtable was back; want within 3s", took.Round(time.Millisecond))
	}
}
