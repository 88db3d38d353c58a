package store_test

import (
	"context"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/snapflip/snapflip/internal/memstore"
	"github.com/snapflip/snapflip/internal/storetest"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/store"
)

// TestContract holds the Bigtable store, on the emulator, to the contract the
// in-memory store keeps (internal/memstore's TestContract): the same cases, one
// emulator, a dataset each.
func TestContract(t *testing.T) {
	f := &grpcFaults{}
	cfg := testenv.StoreConfig(testenv.Bigtable(t))
	cfg.DialOptions = []grpc.DialOption{grpc.WithUnaryInterceptor(f.unary), grpc.WithStreamInterceptor(f.stream)}
	st := &faultyStore{Store: testenv.Store(t, cfg), f: f}
	storetest.Run(t, func(*testing.T) storetest.Store { return st })
}

// faultyStore is a Store whose conditional writes fail as FailNext says, at the gRPC
// layer, as a lost reply or an unreachable Bigtable makes them.
type faultyStore struct {
	*store.Store
	f *grpcFaults
}

// FailNext fails the next conditional write (every operation the contract fails
// is one: a flip, a manifest's create or update, a slot claim, a lease's write).
func (s *faultyStore) FailNext(op memstore.Op, fault memstore.Fault) {
	if op == memstore.OpWrite {
		panic("faultyStore: batched writes are failed by fault_test.go's rowFailer")
	}
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	s.f.writes = append(s.f.writes, fault)
}

// grpcFaults fails CheckAndMutateRow calls, and the reads after them, as queued.
type grpcFaults struct {
	mu     sync.Mutex
	writes []memstore.Fault
	reads  int // ReadRows calls still to fail
}

func (f *grpcFaults) next() memstore.Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.writes) == 0 {
		return 0
	}
	fault := f.writes[0]
	f.writes = f.writes[1:]
	if fault == memstore.ReplyLostAndRereadFails {
		f.reads++
	}
	return fault
}

func (f *grpcFaults) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method != "/google.bigtable.v2.Bigtable/CheckAndMutateRow" {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	switch f.next() {
	case memstore.Refused:
		return status.Error(codes.Unavailable, "injected: refused")
	case memstore.ReplyLost, memstore.ReplyLostAndRereadFails:
		if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
			return err
		}
		return status.Error(codes.Unavailable, "injected: reply lost")
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// stream fails a ReadRows call queued to fail with a code the client does not retry.
func (f *grpcFaults) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if method == "/google.bigtable.v2.Bigtable/ReadRows" {
		f.mu.Lock()
		fail := f.reads > 0
		if fail {
			f.reads--
		}
		f.mu.Unlock()
		if fail {
			return nil, status.Error(codes.Internal, "injected: read failed")
		}
	}
	return streamer(ctx, desc, cc, method, opts...)
}
