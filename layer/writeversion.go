package layer

import (
	"context"
	"fmt"
	"time"

	"github.com/snapflip/snapflip/index"
	"github.com/snapflip/snapflip/snapshot"
)

// Store is what a Writer needs from storage.
type Store interface {
	// NewWriter returns a writer for the documents of one version; it stops when ctx
	// ends.
	NewWriter(ctx context.Context, dataset string, v snapshot.Version) snapshot.DocumentWriter
	// DocumentGetter reads the parent's unchanged documents a merged delta copies.
	snapshot.DocumentGetter
	// LocateDocuments is GetDocuments that also says which layer of the chain each
	// document was read from.
	LocateDocuments(ctx context.Context, in snapshot.ChainRef, ids []string) (map[string]snapshot.Located, error)
	// RecordedLive returns how many live ids the chain the layer tops holds, as the
	// publish that wrote the layer recorded it (snapshot.DocumentWriter.WriteLive); false when
	// none did.
	RecordedLive(ctx context.Context, dataset string, layer snapshot.Version, collection string) (int64, bool, error)
	RunReader
}

// Writer writes versions' documents for a snapshot.Publisher: per collection a layer
// against the parent's chain when the version is layered, else a full copy.
type Writer struct {
	Store Store
	// MaxDocumentBytes bounds one document; a larger one fails the sync naming it.
	MaxDocumentBytes int
	// ProgressEvery is how often a long copy reports its progress (EventCopying);
	// default 10s.
	ProgressEvery time.Duration
	// MaxLayers bounds a chain (default DefaultMaxLayers): a collection whose chain
	// is this long gets a merged delta next time it changes, which replaces every
	// delta of the chain (its changes plus what those deltas held), leaving two
	// layers. 1 makes every layer a base.
	MaxLayers int
	// RebaseRatio writes a base once the chain's deltas hold more rows than this
	// share of the base's (default DefaultRebaseRatio).
	RebaseRatio float64
	// Runs keeps the parent chain's fingerprint runs decoded; nil reads them from
	// Store every time. A long-running syncer sets a RunCache over Store.
	Runs *RunCache
	Now  func() time.Time
	// Observer receives what the writer does besides its result (a layer written, a
	// long copy's progress); nil discards it.
	Observer snapshot.Observer
	// Compactor, when set, builds the bases a chain's size or age calls for beside
	// the stream of versions (Compactor), rather than in the version that needs one.
	Compactor *Compactor
	// BesideMinRows is the least base the Compactor builds (zero: DefaultBesideMinRows):
	// a chain whose base holds fewer documents gets its base in the version.
	BesideMinRows int64

	keyedBytesMax int // the documents a keyed read holds; 0: maxKeyedBytes (tests set less)
}

var _ snapshot.VersionWriter = (*Writer)(nil)

// versionWrite is one WriteVersion call: the writer and the version it writes.
type versionWrite struct {
	*Writer
	req     snapshot.WriteRequest
	dataset string
	// indexes are each collection's indexes in the version, as the manifest records
	// them (declared) and typed.
	indexes  map[string][]index.Def
	declared map[string][]snapshot.IndexDef
	// fullIndexes are what a full copy wrote per collection and index.
	fullIndexes map[string][]snapshot.IndexWrite
	// skip names the collections the version does not write: held, or new and
	// waiting for their base beside the stream (splitHolds).
	skip map[string]bool
}

// WriteVersion writes the version's documents (snapshot.VersionWriter).
func (w *Writer) WriteVersion(ctx context.Context, req snapshot.WriteRequest) (snapshot.WriteResult, error) {
	if c := w.Compactor; c != nil && !req.Base {
		// A version: the bases beside the stream yield to it.
		c.commitStarted()
		defer c.commitEnded()
	}
	vw := &versionWrite{Writer: w, req: req, dataset: req.Manifest.Dataset}
	var err error
	if vw.indexes, vw.declared, err = readIndexes(ctx, req.Snap, req.Collections); err != nil {
		return snapshot.WriteResult{}, err
	}
	if req.Manifest.Format == snapshot.FormatLayered {
		ds, ok := req.Snap.(snapshot.DeltaSnapshot)
		if !ok {
			return snapshot.WriteResult{}, fmt.Errorf("a layered version needs a source that can stream deltas")
		}
		return vw.writeLayers(ctx, ds)
	}
	return vw.writeFull(ctx)
}

// Flipped remembers the live ids of the layers the version wrote: the next delta's
// parent count (snapshot.VersionWriter).
func (w *Writer) Flipped(m snapshot.Manifest) {
	for name, c := range m.Collections {
		// The count of a layer this publish wrote is what it counted over a parent
		// it checked. A collection carried unchanged has its parent's manifest
		// count, which nothing here read: not remembered.
		if len(c.Layers) > 0 && c.Own != nil && c.Own.Mode != snapshot.ModeSameFingerprint {
			w.Runs.rememberLive(m.Dataset, name, c.Layers, c.Rows)
		}
	}
	w.Compactor.flipped(m)
}

func (w *Writer) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

// observe reports e, unless the writer has no Observer.
func (w *Writer) observe(ctx context.Context, e snapshot.Event) {
	if w.Observer != nil {
		w.Observer.Observe(ctx, e)
	}
}

// event reports an event about the collection of the version written.
func (vw *versionWrite) event(ctx context.Context, kind snapshot.EventKind, collection string, attrs ...any) {
	vw.observe(ctx, snapshot.Event{Kind: kind, Dataset: vw.dataset, Version: vw.req.Manifest.Version,
		Collection: collection, Attrs: attrs})
}

// truncate shortens s to at most n bytes for an error message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
