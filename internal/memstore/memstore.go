// Package memstore is an in-memory store with the semantics of package store's
// Bigtable store: manifests, the pointer and its fenced flip, coverage and demand,
// leases, tick claims, the audit trail, and documents, index entries and fingerprint
// runs by layer, with the same outcomes (ErrConflict, ErrFenced, ErrPinned,
// ErrSourceBehind, ErrOutcomeUnknown, ErrNotFound). The contract suite
// (internal/storetest) holds the two equal, so the protocol's tests run against
// memory in milliseconds.
//
// Faults are injected per operation (Store.FailNext): an operation fails before it
// applies, or applies and loses its reply, as a Bigtable call can; either way the
// operation is decided as Bigtable's store decides it, by a re-read, which may fail
// too.
//
// It keeps no time: nothing ages out. Bigtable's garbage collection (documents past
// the TTL, manifests past the TTL and its grace, tick claims past SlotRetention, the
// audit trail past AuditRetention) is not modelled, so tests of ageing run on the
// emulator.
package memstore

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// Op names an operation faults are injected into.
type Op int

// The operations FailNext can fail.
const (
	OpFlip Op = iota + 1
	OpCreateManifest
	OpUpdateManifest
	OpClaimTick
	OpSwapLease
	OpWrite
)

// Fault is what an injected failure does.
type Fault int

const (
	// Refused: the operation fails and does not apply (the call never reached
	// storage).
	Refused Fault = iota + 1
	// ReplyLost: the operation applies (when its condition holds), then fails as a
	// lost reply does.
	ReplyLost
	// ReplyLostAndRereadFails: the operation applies, its reply is lost, and the
	// re-read that would decide it fails too.
	ReplyLostAndRereadFails
)

// errInjected is the error of an injected failure.
var errInjected = fmt.Errorf("memstore: injected failure: %w", snapshot.ErrUnavailable)

// Store is an in-memory store. The zero value is not usable: call New.
type Store struct {
	mu        sync.Mutex
	pointers  map[string]*pointerRow
	manifests map[string]map[snapshot.Version][]byte // dataset → version → manifest JSON
	audit     map[string][][]byte                    // dataset → entries' JSON, oldest first
	ticks     map[tickKey]string
	leases    map[string][]byte
	bases     map[string]map[string]snapshot.BaseStatus // dataset → collection → record
	layers    map[layerKey]*layerRows
	faults    map[Op][]Fault
	unreads   int // lease reads still to fail (a lease write's ReplyLostAndRereadFails)

	// IgnoreFence makes FlipPointer skip its fence check: a broken store, which the
	// contract suite must catch. Never set it but to test the suite.
	IgnoreFence bool
}

// New returns an empty store.
func New() *Store {
	return &Store{
		pointers:  map[string]*pointerRow{},
		manifests: map[string]map[snapshot.Version][]byte{},
		audit:     map[string][][]byte{},
		ticks:     map[tickKey]string{},
		leases:    map[string][]byte{},
		bases:     map[string]map[string]snapshot.BaseStatus{},
		layers:    map[layerKey]*layerRows{},
		faults:    map[Op][]Fault{},
	}
}

// FailNext makes the next call of op fail as f says; calls queue in order.
func (s *Store) FailNext(op Op, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[op] = append(s.faults[op], f)
}

// fault takes the next fault queued for op; the caller holds mu.
func (s *Store) fault(op Op) Fault {
	q := s.faults[op]
	if len(q) == 0 {
		return 0
	}
	s.faults[op] = q[1:]
	return q[0]
}

// reread is the re-read with which Bigtable's store decides a conditional write whose
// reply was lost, or whose condition failed: it fails under ReplyLostAndRereadFails.
// An operation that does not re-read never calls it, so a fault cannot outlive its
// operation.
func (f Fault) reread() error {
	if f == ReplyLostAndRereadFails {
		return errInjected
	}
	return nil
}

// read starts a read under mu: it fails, holding nothing, when ctx is done;
// otherwise the caller holds mu until it calls unlock.
func (s *Store) read(ctx context.Context) (unlock func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	return s.mu.Unlock, nil
}

// NewLease returns a lease kept in this store, with the protocol of store.Lease.
func (s *Store) NewLease(name string, cfg store.LeaseConfig) (*store.Lease, error) {
	return store.NewLeaseOn(leaseCell{s}, name, cfg)
}

// Cells returns the store's conditional cells, as store.Store's.
func (s *Store) Cells() store.LeaseCell { return leaseCell{s} }

// leaseCell is the store's store.LeaseCell.
type leaseCell struct{ s *Store }

func (c leaseCell) ReadLease(ctx context.Context, name string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.s.unreads > 0 { // the re-read of a lease write whose reply was lost
		c.s.unreads--
		return nil, errInjected
	}
	return clone(c.s.leases[name]), nil
}

func (c leaseCell) SwapLease(ctx context.Context, name string, prev, next []byte) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	f := c.s.fault(OpSwapLease)
	if f == Refused {
		return false, errInjected
	}
	cur, ok := c.s.leases[name]
	matched := (prev == nil && !ok) || (prev != nil && ok && string(cur) == string(prev))
	if matched {
		c.s.leases[name] = clone(next)
	}
	if f != 0 {
		// store.Lease re-reads with ReadLease, as it does on Bigtable.
		if f == ReplyLostAndRereadFails {
			c.s.unreads++
		}
		return false, errInjected
	}
	return matched, nil
}

type tickKey struct {
	dataset string
	n       int64
}

// ClaimTick claims one scheduled tick of a dataset for holder: exactly one claimer
// wins. It reports whether holder won and who owns the tick.
func (s *Store) ClaimTick(ctx context.Context, dataset string, n int64, holder string) (bool, string, error) {
	if err := ctx.Err(); err != nil {
		return false, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fault(OpClaimTick)
	k := tickKey{dataset, n}
	owner, taken := s.ticks[k]
	if !taken && f != Refused {
		s.ticks[k] = holder
		owner, taken = holder, true
		if f == 0 {
			return true, holder, nil
		}
	}
	// Bigtable's store re-reads after a failed call, or when the tick was taken: a
	// claim it finds decides, whoever made it.
	if err := f.reread(); err != nil {
		return false, "", fmt.Errorf("claim tick %d of %s (re-read failed): %w", n, dataset, err)
	}
	if !taken {
		return false, "", fmt.Errorf("claim tick %d of %s: %w", n, dataset, errInjected)
	}
	return owner == holder, owner, nil
}

// AppendAudit records an entry.
func (s *Store) AppendAudit(ctx context.Context, e snapshot.AuditEntry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	body, err := json.Marshal(e)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	trail := s.audit[e.Dataset]
	// Entries sort by their millisecond, as Bigtable's keys do.
	i := len(trail)
	for i > 0 && decodeAudit(trail[i-1]).At.UnixMilli() > e.At.UnixMilli() {
		i--
	}
	s.audit[e.Dataset] = append(trail[:i:i], append([][]byte{body}, trail[i:]...)...)
	return nil
}

func decodeAudit(b []byte) snapshot.AuditEntry {
	var e snapshot.AuditEntry
	_ = json.Unmarshal(b, &e) // written by AppendAudit
	return e
}

// ListAudit returns a dataset's entries, newest first, at most limit (0: all).
func (s *Store) ListAudit(ctx context.Context, dataset string, limit int) ([]snapshot.AuditEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	trail := s.audit[dataset]
	var out []snapshot.AuditEntry
	for i := len(trail) - 1; i >= 0 && (limit <= 0 || len(out) < limit); i-- {
		out = append(out, decodeAudit(trail[i]))
	}
	return out, nil
}

// AuditAt returns the newest entry at or before t, or an error wrapping ErrNotFound
// saying where the trail begins.
func (s *Store) AuditAt(ctx context.Context, dataset string, t time.Time) (snapshot.AuditEntry, error) {
	all, err := s.ListAudit(ctx, dataset, 0)
	if err != nil {
		return snapshot.AuditEntry{}, err
	}
	var best snapshot.AuditEntry
	found := false
	for _, e := range all {
		if !e.At.After(t) && (!found || e.At.After(best.At)) {
			best, found = e, true
		}
	}
	switch {
	case found:
		return best, nil
	case len(all) == 0:
		return snapshot.AuditEntry{}, fmt.Errorf("%w: the audit trail is empty", snapshot.ErrNotFound)
	}
	return snapshot.AuditEntry{}, fmt.Errorf("%w: no version was current at %s in the audit trail, which begins at %s",
		snapshot.ErrNotFound, t.UTC().Format(time.RFC3339), all[len(all)-1].At.UTC().Format(time.RFC3339))
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

// The interfaces the domain, the layer engine and the read path ask of storage.
var (
	_ snapshot.PublishStore = (*Store)(nil)
	_ snapshot.AdminStore   = (*Store)(nil)
	_ snapshot.TickStore    = (*Store)(nil)
	_ snapshot.DemandStore  = (*Store)(nil)
)
