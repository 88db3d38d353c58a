package snapshot

import (
	"context"
	"time"
)

// BaseStatus is a collection's base beside the stream of versions as its builder
// records it in storage, so that an operator sees it from any process: the status
// page, `syncer versions`. Each collection has one record, replaced as the base moves
// on and by the collection's next base.
type BaseStatus struct {
	Collection string `json:"collection"`
	// Layer is the base's own layer version; From the version whose chain it is
	// built from; Why why it is built.
	Layer Version `json:"layer,omitempty"`
	From  Version `json:"from"`
	Why   string  `json:"why"`
	// State is "building", "built" (waiting for a version to take it), "taken" (a
	// version's chain holds it), "failed" (tried again after RetryAt) or "dropped"
	// (the chain moved on before a version took it).
	State    string    `json:"state"`
	Rows     int64     `json:"rows"`     // documents written
	Expected int64     `json:"expected"` // documents the chain holds
	Bytes    int64     `json:"bytes"`    // bytes of the documents written
	Started  time.Time `json:"started"`
	// Updated is when the record was written: a record in state building that is
	// older than a few progress intervals belongs to a builder that stopped.
	Updated time.Time `json:"updated"`
	Writer  string    `json:"writer,omitempty"` // the syncer building it
	Err     string    `json:"error,omitempty"`
	RetryAt time.Time `json:"retry_at,omitzero"`
	// Position, Through and ThroughRows are how far a base read from the source
	// in chunks stood: read as of Position, its documents up to the id Through,
	// ThroughRows of them, are in storage under Layer. A read that stops goes on
	// from there (BaseResumer).
	Position    *Position `json:"position,omitempty"`
	Through     string    `json:"through,omitempty"`
	ThroughRows int64     `json:"through_rows,omitempty"`
	// Plan and Cuts, for a base shared by the syncer replicas, name its parts:
	// the ids that cut it (PartedSnapshot) and the layer version that names their
	// claims. Position is then set from the start.
	Plan Version  `json:"plan,omitempty"`
	Cuts []string `json:"cuts,omitempty"`
}

// Building reports whether the base is still in hand: being built, built and
// waiting for a version, or failed and to be tried again.
func (b BaseStatus) Building() bool {
	return b.State == "building" || b.State == "built" || b.State == "failed"
}

// ETA estimates, from the rows written since Started, when the base is written;
// zero when it cannot tell (no rows yet, or none expected).
func (b BaseStatus) ETA() time.Time {
	if b.State != "building" || b.Rows <= 0 || b.Expected <= b.Rows {
		return time.Time{}
	}
	spent := b.Updated.Sub(b.Started)
	left := time.Duration(float64(spent) * float64(b.Expected-b.Rows) / float64(b.Rows))
	return b.Updated.Add(left)
}

// BaseStore keeps the records of bases beside the stream.
type BaseStore interface {
	// RecordBase stores b as its collection's record, replacing the one before.
	RecordBase(ctx context.Context, dataset string, b BaseStatus) error
	// ListBases returns the dataset's records, by collection name.
	ListBases(ctx context.Context, dataset string) ([]BaseStatus, error)
}
