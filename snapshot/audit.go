package snapshot

import (
	"context"
	"time"
)

// Action is what an audit entry records.
type Action string

// The audited actions.
const (
	ActionFlip     Action = "flip"     // a scheduled or manual publish moved the pointer
	ActionRollback Action = "rollback" // an operator moved the pointer back, and pinned it
	ActionUnpin    Action = "unpin"    // an operator resumed scheduled publishing
)

// AuditEntry is one recorded change of the pointer.
type AuditEntry struct {
	Dataset string    `json:"dataset"`
	At      time.Time `json:"at"`
	Action  Action    `json:"action"`
	From    Version   `json:"from,omitempty"`
	To      Version   `json:"to"`
	Fence   uint64    `json:"token"`
	Pinned  bool      `json:"pinned"`
	// By names who did it: user@host for the CLI, the API's caller otherwise.
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
}

// AuditStore keeps the audit trail.
type AuditStore interface {
	// AppendAudit records an entry.
	AppendAudit(ctx context.Context, e AuditEntry) error
	// ListAudit returns a dataset's entries, newest first, at most limit (0: all).
	ListAudit(ctx context.Context, dataset string, limit int) ([]AuditEntry, error)
	// AuditAt returns the entry that made the dataset's pointer what it was at t (its
	// To is the version current then): the newest entry at or before t. It is an
	// error wrapping ErrNotFound, saying where the trail begins, when it holds none
	// that old.
	AuditAt(ctx context.Context, dataset string, t time.Time) (AuditEntry, error)
}
