package memstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/snapflip/snapflip/snapshot"
)

// pointerRow is a dataset's pointer as Bigtable's row holds it: the pointer as JSON
// and, beside it, the values conditional writes compare, each of which may be absent.
type pointerRow struct {
	body       []byte // the pointer's JSON; nil before the first flip
	version    *snapshot.Version
	fence      *uint64
	source     *uint64
	pinned     bool
	covered    []byte // the coverage's JSON
	coveredLSN *uint64
	demand     uint64
}

func (s *Store) row(dataset string) *pointerRow {
	r := s.pointers[dataset]
	if r == nil {
		r = &pointerRow{}
		s.pointers[dataset] = r
	}
	return r
}

func ptr[T any](v T) *T { return &v }

// ReadPointer returns the dataset's pointer, or ErrNoVersion.
func (s *Store) ReadPointer(ctx context.Context, dataset string) (snapshot.Pointer, error) {
	unlock, err := s.read(ctx)
	if err != nil {
		return snapshot.Pointer{}, fmt.Errorf("read pointer of dataset %s: %w", dataset, err)
	}
	defer unlock()
	return s.readPointer(dataset)
}

// readPointer is ReadPointer; the caller holds mu.
func (s *Store) readPointer(dataset string) (snapshot.Pointer, error) {
	r := s.pointers[dataset]
	if r == nil || r.body == nil {
		return snapshot.Pointer{}, fmt.Errorf("dataset %s: %w", dataset, snapshot.ErrNoVersion)
	}
	var p snapshot.Pointer
	if err := json.Unmarshal(r.body, &p); err != nil {
		return snapshot.Pointer{}, fmt.Errorf("decode pointer of dataset %s: %w", dataset, err)
	}
	if r.fence != nil {
		p.Fence = *r.fence
	}
	if r.covered != nil {
		if err := json.Unmarshal(r.covered, &p.Covered); err != nil {
			return snapshot.Pointer{}, fmt.Errorf("decode coverage of dataset %s: %w", dataset, err)
		}
	}
	p.Demand = r.demand
	return p, nil
}

// ListPointers returns the pointer of every dataset that has published a version.
func (s *Store) ListPointers(ctx context.Context) (map[string]snapshot.Pointer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]snapshot.Pointer{}
	for dataset, r := range s.pointers {
		if r.body == nil {
			continue
		}
		p, err := s.readPointer(dataset)
		if err != nil {
			return nil, err
		}
		out[dataset] = p
	}
	return out, nil
}

// FlipPointer moves the pointer in one conditional write: refused when the stored
// fence is greater than the token, when the dataset is pinned (unless rolling back),
// when the stored source is newer (unless rolling back), or when the stored version
// is not the expected one.
func (s *Store) FlipPointer(ctx context.Context, dataset string, f snapshot.Flip) (snapshot.Pointer, error) {
	if f.Fence == 0 {
		return snapshot.Pointer{}, fmt.Errorf("%w flip: fencing token 0", snapshot.ErrInvalid)
	}
	p := f.Pointer()
	body, err := json.Marshal(p) // the JSON deep-copies the source's maps
	if err != nil {
		return snapshot.Pointer{}, err
	}
	covered, err := json.Marshal(p.Covered)
	if err != nil {
		return snapshot.Pointer{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		// As Bigtable's store: a write that was never answered, decided by a re-read.
		return s.unknownFlip(dataset, f, 0, err)
	}
	fault := s.fault(OpFlip)
	if fault == Refused {
		return s.unknownFlip(dataset, f, fault, errInjected)
	}
	r := s.row(dataset)
	if s.flipRefused(r, f) {
		if fault != 0 {
			return s.unknownFlip(dataset, f, fault, errInjected)
		}
		return snapshot.Pointer{}, s.whyRefused(dataset, f)
	}
	r.body, r.covered = body, covered
	r.version, r.fence, r.source, r.coveredLSN = ptr(f.Version), ptr(f.Fence), ptr(f.Source.LSN), ptr(f.Source.LSN)
	r.pinned = f.Pin
	if fault != 0 {
		return s.unknownFlip(dataset, f, fault, errInjected)
	}
	return p, nil
}

// flipRefused is FlipPointer's condition; the caller holds mu.
func (s *Store) flipRefused(r *pointerRow, f snapshot.Flip) bool {
	if !s.IgnoreFence && r.fence != nil && *r.fence > f.Fence {
		return true
	}
	if !f.Rollback && (r.pinned || (r.source != nil && *r.source > f.Source.LSN)) {
		return true
	}
	if f.Expected == "" {
		return r.version != nil
	}
	return r.version != nil && *r.version != f.Expected
}

// unknownFlip decides a flip whose reply was lost by re-reading, as Bigtable's store
// does: showing this flip proves it applied; anything else proves nothing. The
// re-read fails as fault says.
func (s *Store) unknownFlip(dataset string, f snapshot.Flip, fault Fault, cause error) (snapshot.Pointer, error) {
	if err := fault.reread(); err != nil {
		cause = fmt.Errorf("%w (and the re-read failed: %v)", cause, err)
	} else if got, err := s.readPointer(dataset); err == nil && got.Version == f.Version && got.Fence == f.Fence {
		return got, nil
	}
	return snapshot.Pointer{}, fmt.Errorf("%w: flip pointer of dataset %s to %s: %w", snapshot.ErrOutcomeUnknown, dataset, f.Version, cause)
}

// whyRefused names why a flip was refused; the caller holds mu.
func (s *Store) whyRefused(dataset string, f snapshot.Flip) error {
	cur, _ := s.readPointer(dataset)
	if r := s.row(dataset); r.fence != nil {
		cur.Fence = *r.fence
	}
	cur.Pinned = s.row(dataset).pinned
	return snapshot.WhyRefused(dataset, f, cur)
}

// RecordCoverage records, without moving the pointer, that its version still holds
// everything c.Snapshot saw; refused like a flip, and when a later coverage is
// recorded.
func (s *Store) RecordCoverage(ctx context.Context, dataset string, token uint64, c snapshot.Coverage) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.Version == "" {
		return fmt.Errorf("%w coverage: no version", snapshot.ErrInvalid)
	}
	body, err := json.Marshal(c)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.row(dataset)
	if r.fence != nil && *r.fence > token || r.pinned || r.version != nil && *r.version != c.Version ||
		r.coveredLSN != nil && *r.coveredLSN > c.LSN {
		cur, _ := s.readPointer(dataset) // zero before the first flip
		if r.fence != nil {
			cur.Fence = *r.fence
		}
		return snapshot.WhyCoverageRefused(dataset, token, c, cur)
	}
	r.covered, r.coveredLSN = body, ptr(c.LSN)
	return nil
}

// RaiseDemand adds one to the dataset's demand counter and returns its new value.
func (s *Store) RaiseDemand(ctx context.Context, dataset string) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.row(dataset)
	r.demand++
	return r.demand, nil
}

// ReadDemand returns the dataset's demand counter, 0 when it was never raised.
func (s *Store) ReadDemand(ctx context.Context, dataset string) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.pointers[dataset]; r != nil {
		return r.demand, nil
	}
	return 0, nil
}

// AdvanceFence raises the pointer's fence to token, never lowering it.
func (s *Store) AdvanceFence(ctx context.Context, dataset string, token uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.row(dataset)
	if r.fence == nil || *r.fence < token {
		r.fence = ptr(token)
	}
	return nil
}
