package store_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
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

// FailNext fails the next conditional write of op (every operation the contract
// fails is one: a flip, a manifest's create or update, a slot claim, a lease's write).
func (s *faultyStore) FailNext(op memstore.Op, fault memstore.Fault) {
	if op == memstore.OpWrite {
		panic("faultyStore: batched writes are failed by fault_test.go's rowFailer")
	}
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if s.f.writes == nil {
		s.f.writes = map[memstore.Op][]memstore.Fault{}
	}
	s.f.writes[op] = append(s.f.writes[op], fault)
}

// grpcFaults fails CheckAndMutateRow calls, each of the operation it was queued for,
// and the reads after them, as queued.
type grpcFaults struct {
	mu     sync.Mutex
	writes map[memstore.Op][]memstore.Fault
	reads  int // ReadRows calls still to fail
}

// opOf names the operation a conditional write is: by its row (the store's key
// layout: p# pointers, m# manifests, s# slots, l# leases) and, for a manifest,
// whether it writes when its condition fails (a create) or holds (an update).
func opOf(req *bigtablepb.CheckAndMutateRowRequest) memstore.Op {
	switch key := string(req.GetRowKey()); {
	case strings.HasPrefix(key, "p#"):
		return memstore.OpFlip
	case strings.HasPrefix(key, "m#") && len(req.GetFalseMutations()) > 0:
		return memstore.OpCreateManifest
	case strings.HasPrefix(key, "m#"):
		return memstore.OpUpdateManifest
	case strings.HasPrefix(key, "s#"):
		return memstore.OpClaimTick
	case strings.HasPrefix(key, "l#"):
		return memstore.OpSwapLease
	}
	return 0
}

// next takes the next fault queued for req's operation.
func (f *grpcFaults) next(req *bigtablepb.CheckAndMutateRowRequest) memstore.Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	op := opOf(req)
	q := f.writes[op]
	if len(q) == 0 {
		return 0
	}
	fault := q[0]
	f.writes[op] = q[1:]
	if fault == memstore.ReplyLostAndRereadFails {
		f.reads++
	}
	return fault
}

func (f *grpcFaults) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	cm, ok := req.(*bigtablepb.CheckAndMutateRowRequest)
	if method != "/google.bigtable.v2.Bigtable/CheckAndMutateRow" || !ok {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	switch f.next(cm) {
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
