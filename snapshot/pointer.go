package snapshot

import (
	"context"
	"fmt"
	"time"
)

// Pointer is the row naming the current version of a dataset.
type Pointer struct {
	// Version is the version every unpinned read is answered from.
	Version Version `json:"version"`
	// Previous is the version the last flip replaced ("" for the first).
	Previous Version `json:"previous,omitempty"`
	// Fence is the newest fencing token that acted on the pointer (flipped it, or
	// advanced the fence on taking the lease); a flip with a smaller token is refused.
	Fence uint64 `json:"fence"`
	// Source is where Version was read from the source.
	Source Position `json:"source"`
	// Pinned stops scheduled flips (set by a rollback); only a rollback or an unpin
	// moves a pinned pointer.
	Pinned bool `json:"pinned"`
	// FlippedAt is when the pointer last moved.
	FlippedAt time.Time `json:"flipped_at"`
	// By names who flipped it; Reason says why (rollbacks, unpins).
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Covered is the newest proof that a version holds everything a source snapshot
	// saw (a sync that found nothing to publish, or the last flip); it speaks for
	// Version only when its own Version is the same. Stored beside the pointer.
	Covered Coverage `json:"-"`
	// Demand counts the requests for a look at the source that read-your-writes
	// waiters have made (RaiseDemand); it only grows. Stored beside the pointer.
	Demand uint64 `json:"-"`
}

// Coverage records that a version holds every commit a source snapshot saw: the
// version's own snapshot, or a later one a sync read and found nothing new in.
type Coverage struct {
	// Version is the version that holds what PgSnapshot saw.
	Version Version `json:"version"`
	// PgSnapshot is the source snapshot (pg_current_snapshot()) and LSN its position.
	PgSnapshot string `json:"snapshot"`
	LSN        uint64 `json:"lsn"`
	// Recovery and NextXid say how PgSnapshot was taken (Position's fields).
	Recovery bool   `json:"recovery,omitempty"`
	NextXid  uint64 `json:"next_xid,omitempty"`
	// Demand is the pointer's Demand as read before the snapshot was taken: every
	// demand up to it was raised before Snapshot, so the source had issued every
	// transaction id a demanding waiter could hold by then.
	Demand uint64 `json:"demand,omitempty"`
	// At is when it was recorded.
	At time.Time `json:"at"`
}

// Covering returns what the pointer's version is known to hold: the coverage recorded
// for it, or else the version's own snapshot.
func (p Pointer) Covering() Coverage {
	if p.Covered.Version == p.Version && p.Covered.PgSnapshot != "" && p.Covered.LSN >= p.Source.LSN {
		return p.Covered
	}
	return Coverage{Version: p.Version, PgSnapshot: p.Source.PgSnapshot, LSN: p.Source.LSN,
		Recovery: p.Source.Recovery, NextXid: p.Source.NextXid, At: p.FlippedAt}
}

// PGSnapshot returns the coverage's snapshot with how it was taken.
func (c Coverage) PGSnapshot() (PGSnapshot, error) {
	return takenSnapshot(c.PgSnapshot, c.Recovery, c.NextXid)
}

// Flip asks to move the pointer.
type Flip struct {
	// Version is the version to point at; it must be sealed and complete.
	Version Version
	// Expected is the version the caller read as current ("" when none): the flip
	// fails with ErrConflict when the pointer has moved since.
	Expected Version
	// Fence is the caller's fencing token; the flip fails with ErrFenced when the
	// stored fence is greater.
	Fence uint64
	// Source is where Version was read; the flip fails with ErrSourceBehind when it
	// is older than the current version's, unless Rollback is set.
	Source Position
	// Rollback marks an operator's rollback: it may move a pinned pointer and may go
	// back in source position.
	Rollback bool
	// Pin sets the pinned flag with the flip (a rollback pins).
	Pin bool
	// By and Reason are recorded with the flip.
	By, Reason string
	// At is the time of the flip.
	At time.Time
	// Demand is the pointer's Demand as read before the version's snapshot was
	// taken, recorded with the flip's coverage (Coverage.Demand).
	Demand uint64
}

// Pointer returns the pointer the flip leaves when it succeeds, with its coverage.
func (f Flip) Pointer() Pointer {
	return Pointer{Version: f.Version, Previous: f.Expected, Fence: f.Fence, Source: f.Source, Pinned: f.Pin,
		FlippedAt: f.At, By: f.By, Reason: f.Reason,
		Covered: Coverage{Version: f.Version, PgSnapshot: f.Source.PgSnapshot, LSN: f.Source.LSN,
			Recovery: f.Source.Recovery, NextXid: f.Source.NextXid, Demand: f.Demand, At: f.At}}
}

// PointerStore reads and flips pointers.
type PointerStore interface {
	// ReadPointer returns the dataset's pointer, or an error wrapping ErrNoVersion
	// when nothing has been published.
	ReadPointer(ctx context.Context, dataset string) (Pointer, error)
	// FlipPointer moves the pointer in one conditional write that storage itself
	// checks. It returns the new pointer, or an error wrapping ErrFenced, ErrPinned,
	// ErrSourceBehind or ErrConflict naming why the flip did not apply. After a lost
	// reply it re-reads the pointer to decide.
	FlipPointer(ctx context.Context, dataset string, f Flip) (Pointer, error)
	// RecordCoverage records, without moving the pointer, that its version c.Version
	// still holds everything c.Snapshot saw, in one conditional write fenced like a
	// flip. It returns an error wrapping ErrFenced (the stored fence is greater than
	// token), ErrPinned, ErrConflict (the pointer names another version) or
	// ErrSourceBehind (a later coverage is recorded already) when it does not apply.
	RecordCoverage(ctx context.Context, dataset string, token uint64, c Coverage) error
}

// DemandStore carries read-your-writes demand from the read side to the syncer.
type DemandStore interface {
	// RaiseDemand adds one to the dataset's demand counter and returns its new value:
	// a waiter asks the syncer to look at the source now.
	RaiseDemand(ctx context.Context, dataset string) (uint64, error)
	// ReadDemand returns the dataset's demand counter (0 when never raised).
	ReadDemand(ctx context.Context, dataset string) (uint64, error)
}

// WhyCoverageRefused names why storage refused to record coverage c with token, given
// the pointer it holds now (its Fence the stored fence, even before the first flip;
// its Covered the recorded coverage): an error wrapping ErrFenced, ErrPinned,
// ErrConflict or ErrSourceBehind, checked in that order, as every store's
// RecordCoverage reports it.
func WhyCoverageRefused(dataset string, token uint64, c Coverage, cur Pointer) error {
	switch {
	case cur.Fence > token:
		return fmt.Errorf("coverage of dataset %s with token %d: stored fence is %d: %w", dataset, token, cur.Fence, ErrFenced)
	case cur.Pinned:
		return fmt.Errorf("coverage of dataset %s: pinned at %s: %w", dataset, cur.Version, ErrPinned)
	case cur.Version != c.Version:
		return fmt.Errorf("coverage of dataset %s at %s: the pointer names %s: %w", dataset, c.Version, cur.Version, ErrConflict)
	default:
		return fmt.Errorf("coverage of dataset %s at LSN %d: one at LSN %d is recorded: %w", dataset, c.LSN, cur.Covered.LSN, ErrSourceBehind)
	}
}

// WhyRefused names why storage refused flip f of dataset, given the pointer it holds
// now (its Fence the stored fence, even before the first flip): an error wrapping
// ErrFenced, ErrPinned, ErrSourceBehind or ErrConflict, checked in that order, as
// every store's FlipPointer reports it.
func WhyRefused(dataset string, f Flip, cur Pointer) error {
	switch {
	case cur.Fence > f.Fence:
		return fmt.Errorf("flip of dataset %s to %s with token %d: stored fence is %d: %w",
			dataset, f.Version, f.Fence, cur.Fence, ErrFenced)
	case cur.Pinned && !f.Rollback:
		return fmt.Errorf("flip of dataset %s to %s: pinned at %s (%s): %w",
			dataset, f.Version, cur.Version, cur.Reason, ErrPinned)
	case !f.Rollback && cur.Source.LSN > f.Source.LSN:
		return fmt.Errorf("flip of dataset %s to %s: its source %s is older than the current %s: %w",
			dataset, f.Version, f.Source, cur.Source, ErrSourceBehind)
	default:
		return fmt.Errorf("flip of dataset %s to %s: expected current version %q, found %q: %w",
			dataset, f.Version, f.Expected, cur.Version, ErrConflict)
	}
}
