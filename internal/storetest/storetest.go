// Package storetest is the contract every store of snapshflip's data keeps: one suite
// of cases that runs against the Bigtable store (on the emulator) and the in-memory
// store (internal/memstore), so that a protocol tested on memory holds on Bigtable.
// The cases cover the pointer's conditional flip and each way it is refused, coverage
// and demand, manifests and their transitions, tick claims, leases and their fencing
// tokens, the audit trail, documents, index entries and fingerprint runs through a
// chain of layers, and the outcome of a write whose reply is lost.
package storetest

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/snapflip/snapflip/internal/memstore"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/resolver"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// Contract is every storage interface the contract covers: the one set of methods a
// store of snapflip's data has.
type Contract interface {
	snapshot.PublishStore
	snapshot.AuditStore
	snapshot.TickStore
	snapshot.DemandStore
	snapshot.BaseStore
	layer.Store
	layer.DiffStore
	layer.ReadStore
	layer.RunSeeker
	resolver.ReadStore
	AdvanceFence(ctx context.Context, dataset string, token uint64) error
	ListManifests(ctx context.Context, dataset string) ([]snapshot.Manifest, error)
	ListPointers(ctx context.Context) (map[string]snapshot.Pointer, error)
	ScanIndex(ctx context.Context, in snapshot.ChainRef, fn func(entry string) bool) error
	ScanSpan(ctx context.Context, in snapshot.ChainRef, span snapshot.Span, limit int) ([]snapshot.Document, bool, error)
	NewLease(name string, cfg store.LeaseConfig) (*store.Lease, error)
}

// Store is a store the cases run against: the contract, and faults to inject.
type Store interface {
	Contract
	// FailNext makes the next call of op fail as f says (memstore.Store.FailNext).
	FailNext(op memstore.Op, f memstore.Fault)
}

// Both stores keep the whole contract: the storage interfaces of every package
// that reads or writes through them are checked here, so that package store
// depends on the domain (snapshot, index) alone.
var (
	_ Contract = (*store.Store)(nil)
	_ Store    = (*memstore.Store)(nil)
)

// TB is what a case asks of its test: *testing.T, or the recorder Failures uses.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}

// Case is one rule of the contract. Each case uses datasets and leases named after
// itself, so cases may share a store.
type Case struct {
	Name  string
	Check func(t TB, st Store, name string)
}

// Cases is the contract.
var Cases = []Case{
	{"PointerAbsent", pointerAbsent},
	{"FirstFlip", firstFlip},
	{"FlipIsFenced", flipIsFenced},
	{"FlipWithContextDone", flipWithContextDone},
	{"FlipRefusalsInOrder", flipRefusalsInOrder},
	{"CorruptIndexBlock", corruptIndexBlock},
	{"FlipExpectsCurrent", flipExpectsCurrent},
	{"FlipPinned", flipPinned},
	{"FlipSourceBehind", flipSourceBehind},
	{"FlipTokenZero", flipTokenZero},
	{"AdvanceFence", advanceFence},
	{"Coverage", coverage},
	{"Demand", demand},
	{"Manifests", manifests},
	{"ManifestOrder", manifestOrder},
	{"Slots", slots},
	{"LeaseTokens", leaseTokens},
	{"LeaseTakeover", leaseTakeover},
	{"LeaseFencesFlips", leaseFencesFlips},
	{"Audit", audit},
	{"BaseRecords", baseRecords},
	{"FlushAcknowledges", flushAcknowledges},
	{"ChainReads", chainReads},
	{"ChainPages", chainPages},
	{"IndexEntries", indexEntries},
	{"Runs", runs},
	{"FlipReplyLost", flipUnder(memstore.ReplyLost, "a flip whose reply was lost, re-read", nil)},
	{"FlipRefusedUnknown", flipUnder(memstore.Refused, "a flip that failed without applying", snapshot.ErrOutcomeUnknown)},
	{"FlipReplyLostRereadFails", flipUnder(memstore.ReplyLostAndRereadFails, "a flip applied whose reply and re-read failed", snapshot.ErrOutcomeUnknown)},
	{"ManifestReplyLost", manifestReplyLost},
	{"SlotReplyLost", slotReplyLost},
	{"LeaseReplyLost", leaseReplyLost},
	{"ManifestFailedCallDecided", manifestFailedCallDecided},
	{"SlotFailedCallDecided", slotFailedCallDecided},
	{"RereadFaultEndsWithItsCall", rereadFaultEndsWithItsCall},
	{"MalformedVersion", malformedVersion},
}

// Run runs every case as a subtest, each on the store open returns.
func Run(t *testing.T, open func(t *testing.T) Store) {
	for _, c := range Cases {
		t.Run(c.Name, func(t *testing.T) { c.Check(t, open(t), c.Name) })
	}
}

// Failures runs every case on the store open returns, recording instead of failing,
// and returns the names of the cases that failed, each with its first complaint: a
// broken store must fail some.
func Failures(open func() Store) map[string]string {
	out := map[string]string{}
	for _, c := range Cases {
		r := &recorder{}
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.Check(r, open(), c.Name)
		}()
		<-done
		if r.failed != "" {
			out[c.Name] = r.failed
		}
	}
	return out
}

// recorder is a TB that records the first failure; Fatalf ends the case's goroutine.
type recorder struct{ failed string }

func (r *recorder) Helper()             {}
func (r *recorder) Logf(string, ...any) {}
func (r *recorder) Errorf(format string, args ...any) {
	if r.failed == "" {
		r.failed = fmt.Sprintf(format, args...)
	}
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}
