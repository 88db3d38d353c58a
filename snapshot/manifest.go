package snapshot

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// State is where a version is in its life. A manifest moves
// writing → sealed → published → retired, or to failed or rolled_back, and only by a
// conditional write on its current state.
type State string

// The states of a version.
const (
	// StateWriting: documents are being written; the version is not readable.
	StateWriting State = "writing"
	// StateSealed: every document is written and the counts match the source; the
	// version may be flipped to.
	StateSealed State = "sealed"
	// StatePublished: the pointer names (or named) this version.
	StatePublished State = "published"
	// StateRetired: a newer version replaced this one by a scheduled flip.
	StateRetired State = "retired"
	// StateFailed: the sync that wrote it failed or lost; never served.
	StateFailed State = "failed"
	// StateUnchanged: the sync found the source as the current version holds it
	// (the same digests), so nothing was published; never served, left to expire.
	// Not a failure: a quiet source makes one each cycle that reads it.
	StateUnchanged State = "unchanged"
	// StateRolledBack: an operator rolled back away from this version.
	StateRolledBack State = "rolled_back"
)

// transitions lists the states each state may move to.
var transitions = map[State][]State{
	StateWriting:    {StateSealed, StateFailed, StateUnchanged},
	StateSealed:     {StatePublished, StateFailed},
	StatePublished:  {StateRetired, StateRolledBack},
	StateRetired:    {StatePublished},
	StateRolledBack: {StatePublished},
	StateFailed:     {},
	StateUnchanged:  {},
}

// CanTransition reports whether a manifest may move from one state to another.
func CanTransition(from, to State) bool { return slices.Contains(transitions[from], to) }

// Servable reports whether a version in state s may be read: it is complete.
func (s State) Servable() bool {
	switch s {
	case StateSealed, StatePublished, StateRetired, StateRolledBack:
		return true
	}
	return false
}

// Valid reports whether s is one of the known states.
func (s State) Valid() bool { _, ok := transitions[s]; return ok }

// CollectionStats is what a version holds of one collection.
type CollectionStats struct {
	// Rows is the number of documents read from the source.
	Rows int64 `json:"rows"`
	// Written is the number of documents written to storage; equal to Rows when sealed.
	Written int64 `json:"written"`
	// Bytes is the total size of the documents, in bytes.
	Bytes int64 `json:"bytes"`
	// Digest is an order-independent hash of every (id, document) pair, hex.
	Digest string `json:"digest"`
	// Layers is the chain a read of the collection consults, newest first, ending at
	// a base (format 2). Empty: the version's own rows alone hold the collection (a
	// full copy, format 0).
	Layers []LayerRef `json:"layers,omitempty"`
	// Own says what this version's publish wrote for the collection (format 2).
	Own *OwnLayer `json:"own,omitempty"`
	// Indexes are the collection's indexes in this version: every layer of its chain
	// holds their entries for the documents it holds. Absent from versions written
	// before they were declared.
	Indexes []IndexDef `json:"indexes,omitempty"`
	// Held, when set, says the collection's layers reflect an earlier source
	// position than the version's: its definition changed, and its new base is
	// built beside the stream of versions while the collection stays whole, in its
	// old shape, at its last state before the change. Nil: the version's position.
	Held *Held `json:"held,omitempty"`
}

// Held is where a held collection stands (CollectionStats.Held).
type Held struct {
	// Source is the position the collection's layers reflect: the version's that
	// last wrote it.
	Source Position `json:"source"`
	// Why says why the collection is held; Since when the hold began.
	Why   string    `json:"why"`
	Since time.Time `json:"since"`
}

// CollectionSource returns the source position collection name's layers reflect:
// its Held position, or else the version's.
func (m *Manifest) CollectionSource(name string) Position {
	if h := m.Collections[name].Held; h != nil {
		return h.Source
	}
	return m.Source
}

// CollectionCovers reports whether a read of collection name from the version,
// which covers tok, covers it for that collection too. A token that names a version
// (the Snapshot-Token of an earlier answer) asks for monotonic reads, which a
// held collection keeps, as it never goes back: covered. A write's token (one that
// names no version) is covered by a held collection only when the position it is
// held at covers it.
func (m *Manifest) CollectionCovers(name string, tok Token) bool {
	h := m.Collections[name].Held
	if h == nil || tok.Version != "" {
		return true
	}
	sn, err := h.Source.PGSnapshot()
	return err == nil && sn.Covers(tok)
}

// HeldCollections returns the names of the version's held collections, in order.
func (m *Manifest) HeldCollections() []string {
	var out []string
	for _, name := range m.CollectionNames() {
		if m.Collections[name].Held != nil {
			out = append(out, name)
		}
	}
	return out
}

// IndexDef is one index of a collection: its fields, each typed by the base type of
// its column as Postgres names it (pg_type.typname; "text" for an enum), which fixes
// how its values compare.
type IndexDef struct {
	Name   string   `json:"name"`
	Fields []string `json:"fields"`
	Types  []string `json:"types"`
}

// IndexWrite is what one layer wrote for one index: entries for new values and
// tombstones for values its documents no longer hold, and how many of those cells
// storage acknowledged (Written): a layer is complete when it is Entries + Removed.
type IndexWrite struct {
	Name    string `json:"name"`
	Entries int64  `json:"entries"`
	Removed int64  `json:"removed,omitempty"`
	Bytes   int64  `json:"bytes"`
	Written int64  `json:"written"`
	// Packed says the layer (a base) wrote its entries sorted in Blocks, a stored
	// row each, rather than a row per entry, and the blocks' keys in Chunks of a
	// directory (its run); ChunksWritten are those storage acknowledged.
	Packed        bool  `json:"packed,omitempty"`
	Blocks        int64 `json:"blocks,omitempty"`
	Chunks        int64 `json:"chunks,omitempty"`
	ChunksWritten int64 `json:"chunks_written,omitempty"`
}

// Acknowledged reports whether storage acknowledged every cell and directory chunk
// the layer queued for the index.
func (iw IndexWrite) Acknowledged() bool {
	return iw.Written == iw.Cells() && iw.ChunksWritten == iw.Chunks
}

// Cells returns how many cells the layer queued for the index: its blocks when
// packed, else its entries and tombstones.
func (iw IndexWrite) Cells() int64 {
	if iw.Packed {
		return iw.Blocks
	}
	return iw.Entries + iw.Removed
}

// LayerKind says what a layer holds.
type LayerKind string

// Layer kinds.
const (
	// LayerNone: a publish that changed nothing of a collection wrote no layer.
	LayerNone LayerKind = ""
	// LayerBase holds every live row of a collection.
	LayerBase LayerKind = "base"
	// LayerDelta holds the rows that differ from the parent, and tombstones.
	LayerDelta LayerKind = "delta"
)

// LayerRef names one layer of a chain: rows written by one publish under its
// version's prefix, shared by every later version whose chain includes it.
type LayerRef struct {
	Version    Version   `json:"version"`
	Kind       LayerKind `json:"kind"`
	Docs       int64     `json:"docs"`
	Tombstones int64     `json:"tombstones,omitempty"`
	// Bytes is the size of the layer's documents.
	Bytes int64 `json:"bytes"`
	// DataTime is the layer's cell timestamp, or a lower bound of it: its TTL counts
	// from here.
	DataTime time.Time `json:"data_time"`
	// Merged is how many of the parent chain's newest layers this delta merges: it
	// holds every id they name (documents copied, tombstones kept), so the chain
	// below it is the parent's without them. Zero for a plain delta or a base.
	Merged int `json:"merged,omitempty"`
}

// OwnLayer is what one publish did for one collection.
type OwnLayer struct {
	Kind LayerKind `json:"kind"` // base, delta, or LayerNone when nothing changed
	// Mode says how changed rows were found: as the source's ScanSince reports it
	// ("row-version", or "content: <why>" when every row was rendered and compared by
	// content), ModeChangedOnly, or ModeSameFingerprint.
	Mode     LayerMode `json:"mode,omitzero"`
	Inserted int64     `json:"inserted"`
	Changed  int64     `json:"changed"`
	Deleted  int64     `json:"deleted"`
	// Rendered counts the rows the source turned into JSON.
	Rendered int64 `json:"rendered"`
	// Copied counts the unchanged documents and tombstones a merged delta copied
	// from the parent's deltas it replaces (LayerRef.Merged).
	Copied int64 `json:"copied,omitempty"`
	// Emitted and Written count the cells (documents and tombstones) queued and
	// acknowledged; Chunks and ChunksWritten the same for the fingerprint run.
	Emitted       int64 `json:"emitted"`
	Written       int64 `json:"written"`
	Chunks        int64 `json:"chunks"`
	ChunksWritten int64 `json:"chunks_written"`
	// Indexes are what the layer wrote for each index; their cells are counted here,
	// not in Emitted and Written, and the version seals only when each index's
	// acknowledged cells are its Entries plus Removed.
	Indexes []IndexWrite `json:"indexes,omitempty"`
	// Rebased says the collection's chain took, in this version, a base read from
	// the source beside the stream (it was held, or new): the layer's changes are
	// against that base, not the parent's chain, so a reader of changes reads the
	// collection whole.
	Rebased bool `json:"rebased,omitempty"`
}

// Manifest is a version's record.
type Manifest struct {
	Dataset     string                     `json:"dataset"`
	Version     Version                    `json:"version"`
	State       State                      `json:"state"`
	Collections map[string]CollectionStats `json:"collections"`
	Source      Position                   `json:"source"`
	// Writer names the process that wrote the version (host, pid, client id).
	Writer      string    `json:"writer"`
	StartedAt   time.Time `json:"started_at"`
	SealedAt    time.Time `json:"sealed_at,omitzero"`
	PublishedAt time.Time `json:"published_at,omitzero"`
	// RefreshedAt is when the version's cells were last rewritten with fresh
	// timestamps to keep them from expiring (a pinned version).
	RefreshedAt time.Time `json:"refreshed_at,omitzero"`
	// Fence is the fencing token (lease token) the version was written and flipped
	// under; 0 for a publish without a lease.
	Fence uint64 `json:"token,omitempty"`
	// Tick is the scheduled tick the version was written for; 0 when run by hand.
	Tick int64 `json:"slot,omitempty"`
	// TTL is the documents' time to live when the version was written; a version
	// whose DataTime is older than it is gone.
	TTL time.Duration `json:"ttl,omitempty"`
	// Reason says why the version failed or was rolled back.
	Reason string `json:"reason,omitempty"`
	// Format is 0 for a full copy (every collection's rows under the version alone)
	// and 2 for a layered version (CollectionStats.Layers). A reader refuses a format
	// it does not know rather than serve it wrongly.
	Format int `json:"format,omitempty"`
	// Parent is the version a layered version's deltas were computed against.
	Parent Version `json:"parent,omitempty"`
	// BytesWritten is what the publish sent to storage: row keys and values.
	BytesWritten int64 `json:"bytes_written,omitempty"`
	// ChangeSeen is when the watch first saw the change this version publishes (zero
	// for a scheduled publish): PublishedAt minus it is the commit-to-publish delay,
	// give or take one watch interval.
	ChangeSeen time.Time `json:"change_seen,omitzero"`
}

// Known manifest formats.
const (
	FormatFull    = 0
	FormatLayered = 2
	// FormatHeld is how a layered version that holds a collection, or took a base
	// read from the source beside the stream, is stored: a release that does not
	// know held collections refuses it (as gone) rather than judge a write's token
	// by the version alone, or tell a rebased collection's changes against the
	// wrong parent. Read back, it is FormatLayered with those collections marked.
	FormatHeld = 3
)

// heldReaderNeeded reports whether reading m takes a release that knows held
// collections: one is held, or took a base read from the source.
func (m *Manifest) heldReaderNeeded() bool {
	for _, c := range m.Collections {
		if c.Held != nil || (c.Own != nil && c.Own.Rebased) {
			return true
		}
	}
	return false
}

// EncodeManifest returns m as storage keeps it: JSON, a layered version that holds
// a collection or took a base read from the source as FormatHeld.
func EncodeManifest(m Manifest) ([]byte, error) {
	if m.Format == FormatLayered && m.heldReaderNeeded() {
		m.Format = FormatHeld
	}
	return json.Marshal(m)
}

// DecodeManifest reads a manifest as storage keeps it (EncodeManifest), FormatHeld
// as FormatLayered.
func DecodeManifest(b []byte) (Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, err
	}
	if m.Format == FormatHeld {
		m.Format = FormatLayered
	}
	return m, nil
}

// Chain returns the versions whose rows a read of the collection consults, newest
// first: the layers of a layered version, or the version itself.
func (m *Manifest) Chain(collection string) []Version {
	c := m.Collections[collection]
	if len(c.Layers) == 0 {
		return []Version{m.Version}
	}
	return LayerVersions(c.Layers)
}

// LayerVersions returns the versions of layers, in their order.
func LayerVersions(ls []LayerRef) []Version {
	out := make([]Version, len(ls))
	for i, l := range ls {
		out[i] = l.Version
	}
	return out
}

// Chains returns every collection's chain, keyed by collection, and the same chain
// for each of its indexes, whose entries are stored as a collection of their own
// (IndexCollection) under the same layers.
func (m *Manifest) Chains() map[string][]Version {
	out := make(map[string][]Version, len(m.Collections))
	for name, c := range m.Collections {
		out[name] = m.Chain(name)
		for _, d := range c.Indexes {
			out[IndexCollection(name, d.Name)] = out[name]
		}
	}
	return out
}

// IndexCollection names where the entries of a collection's index are stored: a
// collection of their own beside the documents, written under the same layers, so
// that chains, merges, retention and TTL treat them as they treat documents. A
// collection's name never holds "/", so no collection of documents shares it.
func IndexCollection(collection, index string) string { return collection + "/" + index }

// ChainLength returns the longest chain of any collection (1 for a full copy).
func (m *Manifest) ChainLength() int {
	n := 1
	for _, c := range m.Collections {
		n = max(n, len(c.Layers))
	}
	return n
}

// CheckComplete returns an error unless every collection's written count equals the
// count read from the source: the condition for sealing and for flipping.
func (m *Manifest) CheckComplete() error {
	for name, c := range m.Collections {
		if o := c.Own; o != nil {
			if o.Written != o.Emitted || o.ChunksWritten != o.Chunks {
				return fmt.Errorf("version %s collection %s: wrote %d of %d cells and %d of %d fingerprint chunks",
					m.Version, name, o.Written, o.Emitted, o.ChunksWritten, o.Chunks)
			}
			for _, iw := range o.Indexes {
				if !iw.Acknowledged() {
					return fmt.Errorf("version %s collection %s index %s: wrote %d of %d cells (%d entries, %d tombstones, %d blocks) and %d of %d directory chunks",
						m.Version, name, iw.Name, iw.Written, iw.Cells(), iw.Entries, iw.Removed, iw.Blocks, iw.ChunksWritten, iw.Chunks)
				}
			}
			continue
		}
		if c.Written != c.Rows {
			return fmt.Errorf("version %s collection %s: wrote %d of %d documents", m.Version, name, c.Written, c.Rows)
		}
	}
	return nil
}

// DataTime returns the timestamp of the version's oldest document cells: when they
// were last refreshed (every layer of its chains at once), or else the oldest of when
// the version began and its layers' data times. Its TTL counts from here.
func (m *Manifest) DataTime() time.Time {
	if !m.RefreshedAt.IsZero() {
		return m.RefreshedAt
	}
	t := m.StartedAt
	for _, c := range m.Collections {
		for _, l := range c.Layers {
			if !l.DataTime.IsZero() && l.DataTime.Before(t) {
				t = l.DataTime
			}
		}
	}
	return t
}

// CollectionDataTime returns the timestamp of the oldest document cells the
// collection's chain reads: its layers' data times, none older than the version's
// last refresh; the version's DataTime for a full copy. Its TTL counts from here.
func (m *Manifest) CollectionDataTime(collection string) time.Time {
	c := m.Collections[collection]
	if len(c.Layers) == 0 {
		return m.DataTime()
	}
	var t time.Time
	for _, l := range c.Layers {
		lt := l.DataTime
		if m.RefreshedAt.After(lt) {
			lt = m.RefreshedAt
		}
		if t.IsZero() || lt.Before(t) {
			t = lt
		}
	}
	return t
}

// Rows returns the number of documents in every collection together.
func (m *Manifest) Rows() int64 {
	var n int64
	for _, c := range m.Collections {
		n += c.Rows
	}
	return n
}

// Counts returns each collection's number of documents.
func (m *Manifest) Counts() map[string]int64 {
	out := make(map[string]int64, len(m.Collections))
	for name, c := range m.Collections {
		out[name] = c.Rows
	}
	return out
}

// ExpiresAt returns when the version's documents outlive ttl (the manifest's own TTL
// when it has one): their data time plus the TTL. Zero when no TTL is known.
func (m *Manifest) ExpiresAt(ttl time.Duration) time.Time {
	if m.TTL > 0 {
		ttl = m.TTL
	}
	if ttl <= 0 {
		return time.Time{}
	}
	return m.DataTime().Add(ttl)
}

// Expired reports whether the version's documents have outlived its TTL at now.
func (m *Manifest) Expired(now time.Time) bool {
	return m.TTL > 0 && now.Sub(m.DataTime()) >= m.TTL
}

// CollectionNames returns the manifest's collections in name order.
func (m *Manifest) CollectionNames() []string {
	names := make([]string, 0, len(m.Collections))
	for n := range m.Collections {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// WithVersion returns ms, a list of manifests newest first, with version v's manifest
// (read with read) after them when ms lacks it: how a bounded list of the newest
// versions still shows the current one when a rollback made it older. A v of "", or a
// manifest that cannot be read, leaves ms as it was.
func WithVersion(ctx context.Context, ms []Manifest, v Version, read func(context.Context, Version) (Manifest, error)) []Manifest {
	if v == "" || slices.ContainsFunc(ms, func(m Manifest) bool { return m.Version == v }) {
		return ms
	}
	m, err := read(ctx, v)
	if err != nil {
		return ms
	}
	return append(ms[:len(ms):len(ms)], m)
}
