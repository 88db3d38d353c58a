package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
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

func writeAll(t *testing.T, f *rowFailer, n int, batchTimeout time.Duration) (map[string]int64, error) {
	t.Helper()
	cfg := testenv.StoreConfig(testenv.Bigtable(t))
	cfg.BatchRows = 100
	if batchTimeout > 0 {
		cfg.BatchTimeout = batchTimeout
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
			if _, err := st.GetDocument(ctx, "ds", v, "c", fmt.Sprint(i)); err != nil {
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
}
