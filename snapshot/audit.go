package snapshot

import (
	"context"
	"fmt"
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
	Token   uint64    `json:"token"`
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
}

// CurrentAt returns the entry that made the pointer what it was at t (its To is the
// version current then), from entries newest first as ListAudit returns them: the
// newest entry at or before t. It is an error wrapping ErrNotFound when the trail
// holds none that old.
func CurrentAt(entries []AuditEntry, t time.Time) (AuditEntry, error) {
	for _, e := range entries {
		if !e.At.After(t) {
			return e, nil
		}
	}
	if len(entries) == 0 {
		return AuditEntry{}, fmt.Errorf("%w: the audit trail is empty", ErrNotFound)
	}
	oldest := entries[len(entries)-1].At
	return AuditEntry{}, fmt.Errorf("%w: no version was current at %s in the audit trail, which begins at %s",
		ErrNotFound, t.UTC().Format(time.RFC3339), oldest.UTC().Format(time.RFC3339))
}
