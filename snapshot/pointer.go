package snapshot

import (
	"context"
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
}

// Flip asks to move the pointer.
type Flip struct {
	// Version is the version to point at; it must be sealed and complete.
	Version Version
	// Expected is the version the caller read as current ("" when none): the flip
	// fails with ErrConflict when the pointer has moved since.
	Expected Version
	// Token is the caller's fencing token; the flip fails with ErrFenced when the
	// stored fence is greater.
	Token uint64
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
}
