package snapshot

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Position says where in the source's history a version was read. For Postgres it is
// the WAL position (LSN) taken inside the snapshot, plus the snapshot's description.
// Positions order by LSN: a version read later never has a smaller LSN.
type Position struct {
	// LSN is the source's write-ahead-log position when the snapshot was taken.
	LSN uint64 `json:"lsn"`
	// PgSnapshot is the source's own description of the snapshot (pg_current_snapshot()).
	PgSnapshot string `json:"snapshot,omitempty"`
	// Recovery says the snapshot was taken on a server in recovery (a hot standby):
	// its in-progress list is empty whatever ran, so it proves only what ended
	// before its xmin.
	Recovery bool `json:"recovery,omitempty"`
	// NextXid is the transaction id the source would assign next when the snapshot
	// was taken (0 when unknown): an id at or above it had not been issued.
	NextXid uint64 `json:"next_xid,omitempty"`
	// Config fingerprints the collection definitions the version was read with, so a
	// changed definition is never mistaken for an unchanged source.
	Config string `json:"config,omitempty"`
	// Configs fingerprints each collection's definition alone (its source, key and
	// indexes), so that a change to one collection's rebases that one only.
	Configs map[string]string `json:"configs,omitempty"`
	// Fingerprints holds, per collection the source can fingerprint cheaply, a value
	// that changes whenever the collection's contents change. A collection missing
	// here can only be compared by reading it.
	Fingerprints map[string]string `json:"fingerprints,omitempty"`
	// Definitions holds, per table collection, a fingerprint of its column and type
	// definitions alone: a change there changes documents without writing rows.
	Definitions map[string]string `json:"definitions,omitempty"`
	// Files holds, per table collection, where its rows are stored: a rewrite moves
	// them, changing every row without a change the stream names.
	Files map[string]string `json:"files,omitempty"`
	// System names the database cluster and database the snapshot was read from
	// (empty when the source cannot say): row versions are only comparable within one.
	System string `json:"system,omitempty"`
	// Stream, when the source read its change stream up to the snapshot, says where
	// in that stream the snapshot stands.
	Stream *StreamPosition `json:"stream,omitempty"`
}

// StreamPosition places a snapshot in the source's change stream (for Postgres, a
// logical replication slot).
type StreamPosition struct {
	// Slot names the stream.
	Slot string `json:"slot"`
	// System names the cluster, timeline and database the stream is read from.
	System string `json:"system"`
	// Reading identifies the reading of the stream that took the snapshot.
	Reading string `json:"reading"`
	// Resume is where the stream must be read again from to see every transaction the
	// snapshot does not: each of them committed at or after it.
	Resume uint64 `json:"resume"`
	// Publication fingerprints the publication's definition the stream was read with
	// (its tables, each with its own entry, and what it publishes): a version read
	// with another is no base for the stream's changes.
	Publication string `json:"publication,omitempty"`
	// Barrier, when not 0, is a transaction id every transaction that may span a
	// change of the publication is below: a snapshot whose xmin is below it may miss
	// rows such a transaction wrote before the change, which no stream carries, so
	// the version is no base for the stream's changes either.
	Barrier uint64 `json:"barrier,omitempty"`
}

// PGSnapshot returns the position's snapshot with how it was taken.
func (p Position) PGSnapshot() (PGSnapshot, error) {
	return takenSnapshot(p.PgSnapshot, p.Recovery, p.NextXid)
}

// Same reports whether p and o name the same snapshot: the same position and the
// same description.
func (p Position) Same(o Position) bool { return p.LSN == o.LSN && p.PgSnapshot == o.PgSnapshot }

// SameDefinition reports whether p and o read collection c with the same definition:
// by its own fingerprint when both have one, else by every collection's.
func (p Position) SameDefinition(o Position, c string) bool {
	a, ok1 := p.Configs[c]
	b, ok2 := o.Configs[c]
	if ok1 && ok2 {
		return a == b
	}
	return p.Config == o.Config
}

// SameContents reports whether p and o certainly describe the same contents: the same
// definitions, and either the same LSN or the same fingerprint for every collection.
func (p Position) SameContents(o Position, collections []string) bool {
	if p.Config != o.Config {
		return false
	}
	// The same position and the same snapshot: a commit record can precede its
	// transaction's visibility, so an equal position alone does not prove that the
	// same transactions are visible.
	if p.Same(o) {
		return true
	}
	for _, c := range collections {
		a, ok1 := p.Fingerprints[c]
		b, ok2 := o.Fingerprints[c]
		if !ok1 || !ok2 || a != b {
			return false
		}
	}
	return len(collections) > 0
}

// SnapshotXmin returns the xmin of the snapshot ("xmin:xmax:xip,…"): every
// transaction below it had finished when the snapshot was taken. 0 when unknown.
func (p Position) SnapshotXmin() uint64 {
	x, _, ok := strings.Cut(p.PgSnapshot, ":")
	if !ok {
		return 0
	}
	n, err := strconv.ParseUint(x, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// String formats the LSN the way Postgres does, "16/B374D848".
func (p Position) String() string { return fmt.Sprintf("%X/%X", p.LSN>>32, uint32(p.LSN)) }

// Document is one row of a collection: its id and its JSON object.
type Document struct {
	ID   string
	Body []byte
}

// Source reads the configured collections of a dataset from one consistent snapshot.
type Source interface {
	// Collections returns the names of the collections the source reads, in order.
	Collections() []string
	// Open begins one consistent read of every collection. The caller must Close it.
	Open(ctx context.Context) (SourceSnapshot, error)
}

// BaseOpener is a Source that opens the snapshot of a base read beside the stream
// of versions (a held or new collection's) knowingly: one that follows a change
// stream keeps, from then on, the changes to the collection that snapshot does not
// see, so that a later snapshot's ScanKeyed since the base's position names them.
type BaseOpener interface {
	OpenBase(ctx context.Context, collection string) (SourceSnapshot, error)
}

// BaseResumer is a BaseOpener that goes on with a base an earlier read left
// unfinished (a syncer stopped or killed, a chunk failed).
type BaseResumer interface {
	// ResumeBase opens a snapshot whose ScanSince, with no since, sends the
	// collection's ids after the id after as a base read at at, which Position
	// returns: what a read begun at at would have sent after after, up to the
	// changes since at, which a version that takes the base catches up from at. It
	// fails with an error wrapping ErrCannotResume, saying why, when that catch-up
	// can no longer be told from at (the table was rewritten, its definition or
	// key changed, another cluster).
	ResumeBase(ctx context.Context, collection string, at Position, after string) (SourceSnapshot, error)
}

// BaseSharer is a BaseResumer whose bases several syncers read a share of: a base is
// cut into parts of its id order (PartedSnapshot), and each part is read on its own,
// by whichever replica claims it, as the base read at the base's position.
type BaseSharer interface {
	BaseResumer
	// ReadBasePart opens a snapshot whose ScanSince, with no since, sends the
	// collection's ids after the id after ("": from the first) through the id
	// through ("": to the last), as ResumeBase's does; it fails as ResumeBase does.
	ReadBasePart(ctx context.Context, collection string, at Position, after, through string) (SourceSnapshot, error)
}

// PartedSnapshot is the snapshot of a base (BaseOpener, BaseResumer) that can cut
// its collection into parts that BaseSharer reads.
type PartedSnapshot interface {
	// BaseParts returns the ids that cut the collection into parts of about rows
	// ids each, in byte order (part i holds the ids after cuts[i-1] through
	// cuts[i], the last one those after the last cut), and how the base's changes
	// are told (its ScanSince's mode). No cuts means the collection is read whole
	// by ScanSince. With cuts, the snapshot's own source transaction has ended:
	// it answers Position and Indexes, and the parts are read by ReadBasePart.
	BaseParts(ctx context.Context, collection string, rows int64) (cuts []string, mode LayerMode, err error)
}

// ChunkedSnapshot is a DeltaSnapshot that reads a collection in chunks, each in a
// source transaction of its own, and says when each ends.
type ChunkedSnapshot interface {
	// OnChunk sets fn, called with the last id sent (every id up to it has been
	// sent) as each chunk but the last ends, with no source transaction open, and
	// every so many rows within a chunk, its transaction open. An error from fn
	// ends the scan with it.
	OnChunk(fn func(ctx context.Context, last string) error)
}

// SourceSnapshot is one consistent read of the source.
type SourceSnapshot interface {
	// Position returns where the snapshot was taken.
	Position() Position
	// Scan streams the collection's documents in key order to fn, which owns each
	// document's bytes from then on. It stops at the
	// first error fn returns, returning it. A NULL, duplicate or malformed key fails
	// with an error wrapping ErrSource that names the collection and the key.
	Scan(ctx context.Context, collection string, fn func(Document) error) error
	// Close ends the read. It is safe to call more than once.
	Close(ctx context.Context) error
}

// DeltaSnapshot is a SourceSnapshot that streams a collection in id byte order (the
// store's key order, which fingerprint runs share) and can leave out the JSON of rows
// it can prove unchanged since an earlier snapshot of the same source.
type DeltaSnapshot interface {
	SourceSnapshot
	// ScanSince streams every row of the collection in strictly increasing id byte
	// order. A row certainly unchanged since the snapshot at since is sent with a nil
	// Body (not rendered); every other row with its JSON. since == nil renders every
	// row. It returns how it decided: ModeRowVersion, or a ContentMode saying why
	// every row was rendered. Key errors are Scan's.
	ScanSince(ctx context.Context, collection string, since *Position, fn func(Document) error) (mode LayerMode, err error)
}

// ChangedScanner is a DeltaSnapshot that can send only the rows changed since a
// parent, when it can tell them by row version.
type ChangedScanner interface {
	// ScanChanged calls fn with the collection's rows changed since the snapshot at
	// since, with their JSON, in strictly increasing id byte order, and returns the
	// collection's row count in this snapshot. ok is false, and fn never called, when
	// the rows changed cannot be told apart (ScanSince's content modes) or more than
	// max changed.
	ScanChanged(ctx context.Context, collection string, since *Position, max int64, fn func(Document) error) (total int64, ok bool, err error)
}

// SinceOpener is a Source whose snapshots can cost less when they are told the
// position of the version they will be compared with.
type SinceOpener interface {
	// OpenSince is Open for a version whose parent was read at since (nil for none).
	OpenSince(ctx context.Context, since *Position) (SourceSnapshot, error)
}

// HoldingOpener is a SinceOpener whose snapshots can leave out the cost of telling
// what changed in the collections a version holds at their last state (see
// Bases.Holding): for each of those the snapshot reads the definitions, takes since's
// fingerprint, and counts nothing, so that a version beside a base being read does
// not scan the table that base reads. Such a collection can still be read whole;
// its changed rows alone it cannot tell (ChangedScanner answers not ok).
type HoldingOpener interface {
	// OpenHolding is OpenSince for a version that holds the collections held.
	OpenHolding(ctx context.Context, since *Position, held []string) (SourceSnapshot, error)
}

// Follower is a Source that learns which of its snapshots the published version holds,
// to forget the changes it kept for them.
type Follower interface {
	// Holds tells the source that the version read at ptr, which the pointer names,
	// holds exactly what the snapshot at pos read: pos was flipped to (ptr is pos), or
	// was found to have the same contents as ptr.
	Holds(ctx context.Context, pos, ptr Position)
}

// KeyedScanner is a DeltaSnapshot that knows exactly which ids of a collection
// changed since an earlier snapshot, from the source's change stream.
type KeyedScanner interface {
	// ScanKeyed calls fn, in strictly increasing id byte order, with every id that
	// changed since the snapshot at since: with its JSON when this snapshot holds the
	// id, with a nil Body when it does not (deleted). Ids may be sent that did not
	// change after all. ok is false, and fn never called, when the changed ids are not
	// known exactly for since, or more than max changed.
	ScanKeyed(ctx context.Context, collection string, since *Position, max int64, fn func(Document) error) (ok bool, err error)
}

// PartitionedSnapshot is a SourceSnapshot that can read a collection in parts, in
// parallel, all from the same snapshot.
type PartitionedSnapshot interface {
	SourceSnapshot
	// Partitions returns how many parts the collection should be read in (1: whole).
	Partitions(collection string) int
	// ScanPartition is Scan for one part, 0 <= part < parts; fn is called from one
	// goroutine per part.
	ScanPartition(ctx context.Context, collection string, part, parts int, fn func(Document) error) error
	// Rows returns the collection's row count when the source counted it cheaply.
	Rows(collection string) (int64, bool)
}

// IndexedSnapshot is a SourceSnapshot whose collections declare indexes.
type IndexedSnapshot interface {
	// Indexes returns the collection's declared indexes, each field typed as of the
	// snapshot; none when it declares none. A declared field the documents do not
	// hold is an error wrapping ErrSource that names it.
	Indexes(ctx context.Context, collection string) ([]IndexDef, error)
}
