package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// rowFailer fails a fraction of the rows of every MutateRows reply, at the gRPC layer,
// with the given code. The rows were in fact written (as when a reply is lost): a
// retry writes them again, with the same timestamp.
type rowFailer struct {
	fraction float64
	code     codes.Code
	failed   atomic.Int64
}

func (f *rowFailer) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != "/google.bigtable.v2.Bigtable/MutateRows" {
		return cs, err
	}
	return &failingStream{ClientStream: cs, f: f}, nil
}

type failingStream struct {
	grpc.ClientStream
	f *rowFailer
}

func (s *failingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if r, ok := m.(*bigtablepb.MutateRowsResponse); ok && err == nil {
		for _, e := range r.Entries {
			if rand.Float64() < s.f.fraction {
				e.Status = &statuspb.Status{Code: int32(s.f.code), Message: "injected"}
				s.f.failed.Add(1)
			}
		}
	}
	return err
}

func writeAll(t *testing.T, f *rowFailer, n int, batchTimeout time.Duration, retries ...int) (map[string]int64, error) {
	t.Helper()
	cfg := testenv.StoreConfig(testenv.Bigtable(t))
	cfg.BatchRows = 100
	if batchTimeout > 0 {
		cfg.BatchTimeout = batchTimeout
	}
	for _, r := range retries {
		cfg.RowRetries = r
	}
	cfg.DialOptions = []grpc.DialOption{grpc.WithStreamInterceptor(f.intercept)}
	st := testenv.Store(t, cfg)
	ctx := context.Background()
	v := version(t)
	w := st.NewWriter(ctx, "ds", v)
	for i := range n {
		if err := w.Write(ctx, "c", snapshot.Document{ID: fmt.Sprint(i), Body: []byte(`{}`)}); err != nil {
			return nil, err
		}
	}
	counts, err := w.Close(ctx)
	if err == nil {
		for i := range n {
			if _, err := st.GetDocument(ctx, snapshot.ChainRef{Dataset: "ds", Chain: []snapshot.Version{v}, Collection: "c"}, fmt.Sprint(i)); err != nil {
				t.Fatalf("document %d after retries: %v", i, err)
			}
		}
	}
	return counts, err
}

// TestFaultSomeRowsFail: a fifth of the rows of every batch fail (with a code the
// client does not retry itself); the writer retries them alone and everything lands.
func TestFaultSomeRowsFail(t *testing.T) {
	f := &rowFailer{fraction: 0.2, code: codes.Aborted}
	counts, err := writeAll(t, f, 2000, 0)
	if err != nil || counts["c"] != 2000 {
		t.Fatalf("write with 20%% of rows failing = %v, %v; want all 2000 written", counts, err)
	}
	if f.failed.Load() == 0 {
		t.Fatal("no row failure was injected; the test proves nothing")
	}
	t.Logf("%d row failures injected and retried", f.failed.Load())
}

// TestFaultAllRowsFail: when rows keep failing, each attempt ends at the batch timeout
// (the client retries Aborted on its own until then), the writer gives up after its
// retries with an error, and reports what it wrote; the publisher then never seals.
func TestFaultAllRowsFail(t *testing.T) {
	f := &rowFailer{fraction: 1, code: codes.Aborted}
	start := time.Now()
	counts, err := writeAll(t, f, 300, 200*time.Millisecond)
	t.Logf("gave up after %s: %v", time.Since(start).Round(time.Millisecond), err)
	if err == nil {
		t.Fatalf("write with every row failing succeeded: %v", counts)
	}
	if counts["c"] == 300 {
		t.Errorf("counts %v claim every row was written", counts)
	}
	if !strings.Contains(err.Error(), "after 6 attempts") {
		t.Errorf("err = %v; want the default 5 retries, 6 attempts", err)
	}
}

// A negative RowRetries turns the row retries off: the first failed attempt is the
// batch's last.
func TestFaultNoRowRetries(t *testing.T) {
	f := &rowFailer{fraction: 1, code: codes.Aborted}
	_, err := writeAll(t, f, 100, 200*time.Millisecond, -1)
	if err == nil || !strings.Contains(err.Error(), "after 1 attempts") {
		t.Fatalf("write with RowRetries -1 and every row failing = %v; want an error after 1 attempt", err)
	}
}

// TestStoppedBigtableEndsEveryCall: with the emulator stopped, every call that re-reads
// after a failed conditional write (a slot claim, a flip, manifest writes, a lease
// write), and a scan, fails within a few OpTimeouts, whether its caller gave it no
// deadline or had already given up; none retries a dead Bigtable forever. (The slot
// claim's re-read once ran on context.WithoutCancel, without any deadline, and a syncer
// hung in it for good, deaf to SIGTERM.)
func TestStoppedBigtableEndsEveryCall(t *testing.T) {
	addr, emu := testenv.StartEmulator(t)
	cfg := testenv.StoreConfig(addr)
	cfg.OpTimeout = 300 * time.Millisecond
	st := testenv.Store(t, cfg)
	ctx := context.Background()
	v := version(t)
	m := snapshot.Manifest{Dataset: "ds", Version: v, State: snapshot.StateWriting, StartedAt: time.Now()}
	if err := st.CreateManifest(ctx, m); err != nil {
		t.Fatal(err)
	}
	holds := map[string]snapshot.Hold{}
	for _, name := range []string{"no deadline", "cancelled"} {
		l, err := st.NewLease("publish/"+name, store.LeaseConfig{Holder: "me", Duration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if holds[name], err = l.TryAcquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_ = emu.Process.Kill()
	_ = emu.Wait()

	sealed := m
	sealed.State = snapshot.StateSealed
	calls := []struct {
		name string
		call func(ctx context.Context, mode string) error
	}{
		{"ClaimTick", func(ctx context.Context, _ string) error { _, _, err := st.ClaimTick(ctx, "ds", 1, "me"); return err }},
		{"FlipPointer", func(ctx context.Context, _ string) error {
			_, err := st.FlipPointer(ctx, "ds", snapshot.Flip{Version: v, Fence: 1, At: time.Now()})
			return err
		}},
		{"CreateManifest", func(ctx context.Context, _ string) error {
			m2 := m
			m2.Version = version(t)
			return st.CreateManifest(ctx, m2)
		}},
		{"UpdateManifest", func(ctx context.Context, _ string) error {
			return st.UpdateManifest(ctx, sealed, snapshot.StateWriting)
		}},
		{"Release", func(ctx context.Context, mode string) error { return holds[mode].Release(ctx) }},
		{"ScanDocuments", func(ctx context.Context, _ string) error {
			return st.ScanDocuments(ctx, snapshot.ChainRef{Dataset: "ds", Chain: []snapshot.Version{v}, Collection: "c"}, func(snapshot.Document) bool { return true })
		}},
	}
	limit := 10 * cfg.OpTimeout
	for _, c := range calls {
		for _, mode := range []string{"no deadline", "cancelled"} {
			t.Run(c.name+"/"+mode, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				if mode == "cancelled" {
					cancel() // a shutdown: the caller has given up
				}
				defer cancel()
				start := time.Now()
				done := make(chan error, 1)
				go func() { done <- c.call(ctx, mode) }()
				select {
				case err := <-done:
					took := time.Since(start)
					t.Logf("failed after %s: %v", took.Round(time.Millisecond), err)
					if err == nil {
						t.Error("succeeded against a stopped Bigtable")
					}
					if mode == "no deadline" && !errors.Is(err, snapshot.ErrUnavailable) {
						t.Errorf("error %v; want ErrUnavailable", err)
					}
				case <-time.After(limit):
					t.Errorf("still running %s after it started (op timeout %s): it would retry a stopped Bigtable forever", limit, cfg.OpTimeout)
				}
			})
		}
	}
}
