package memstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/snapflip/snapflip/snapshot"
)

// Source is an in-memory snapshot.Source: collections of documents a test changes
// between publishes. Every change moves its position on, as a commit moves
// Postgres's LSN, and stamps the row with it, as a row version: a snapshot sees the
// documents as they were when it was opened, and streams deltas (ScanSince) leaving
// out the rows not written since an earlier snapshot, so layered versions are
// written as from Postgres.
type Source struct {
	mu          sync.Mutex
	collections []string
	docs        map[string]map[string][]byte
	stamps      map[string]map[string]uint64 // the LSN each row was last written at
	lsn         uint64
	fail        map[string]error // a collection's scans fail with it
	shapes      map[string]int   // each collection's definition, changed by Redefine

	// BetweenChunks, when set, is called between two chunks of a base read beside
	// the stream (OpenBase), with no lock held: a test changes the source there.
	BetweenChunks func()
}

var _ snapshot.Source = (*Source)(nil)
var _ snapshot.DeltaSnapshot = (*sourceSnapshot)(nil)

// NewSource returns a source of the named collections, empty.
func NewSource(collections ...string) *Source {
	s := &Source{collections: collections, docs: map[string]map[string][]byte{}, stamps: map[string]map[string]uint64{},
		lsn: 1, fail: map[string]error{}, shapes: map[string]int{}}
	for _, c := range collections {
		s.docs[c], s.stamps[c] = map[string][]byte{}, map[string]uint64{}
	}
	return s
}

// Put writes a document (its JSON body) into a collection.
func (s *Source) Put(collection, id, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lsn++
	s.docs[collection][id] = []byte(body)
	s.stamps[collection][id] = s.lsn
}

// Delete removes a document from a collection.
func (s *Source) Delete(collection, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lsn++
	delete(s.docs[collection], id)
	delete(s.stamps[collection], id)
}

// Redefine changes a collection's definition, as a column added with a default
// does a table's: every document of it gains (or changes) a field "shape" naming the
// definition, without a row being written, and the position's definitions say so.
func (s *Source) Redefine(collection string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lsn++
	s.shapes[collection]++
}

// AddCollection adds an empty collection to the source's.
func (s *Source) AddCollection(collection string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lsn++
	s.collections = append(s.collections, collection)
	s.docs[collection], s.stamps[collection] = map[string][]byte{}, map[string]uint64{}
}

// Token returns a write's read-your-writes token for the source's last change: a
// snapshot opened after it covers it, none opened before.
func (s *Source) Token() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("x:%d", s.lsn-1)
}

// Render returns document body of collection as a snapshot of the source renders it
// now: with its definition's "shape" field once the collection was redefined.
func (s *Source) Render(collection, body string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(render([]byte(body), s.shapes[collection]))
}

// render adds the shape field of definition n (none for 0) to a JSON object.
func render(body []byte, n int) []byte {
	if n == 0 || len(body) < 2 {
		return slices.Clone(body)
	}
	sep := ","
	if string(body) == "{}" {
		sep = ""
	}
	return fmt.Appendf(nil, "%s%s\"shape\":%d}", body[:len(body)-1], sep, n)
}

// FailScans makes every later scan of collection fail with err (nil: succeed again).
func (s *Source) FailScans(collection string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.fail, collection)
	} else {
		s.fail[collection] = err
	}
	s.lsn++
}

// Documents returns a copy of a collection's documents, id → body.
func (s *Source) Documents(collection string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for id, b := range s.docs[collection] {
		out[id] = string(render(b, s.shapes[collection]))
	}
	return out
}

// Collections returns the collections' names, in order.
func (s *Source) Collections() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.collections)
}

// Open takes a snapshot of every collection.
func (s *Source) Open(ctx context.Context) (snapshot.SourceSnapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := &sourceSnapshot{pos: snapshot.Position{LSN: s.lsn, PgSnapshot: fmt.Sprintf("%d:%d:", s.lsn, s.lsn), Definitions: map[string]string{}},
		docs: map[string]map[string][]byte{}, stamps: map[string]map[string]uint64{}, fail: maps.Clone(s.fail), shapes: maps.Clone(s.shapes)}
	for c, docs := range s.docs {
		snap.docs[c], snap.stamps[c] = maps.Clone(docs), maps.Clone(s.stamps[c])
		snap.pos.Definitions[c] = fmt.Sprint(s.shapes[c])
	}
	return snap, nil
}

type sourceSnapshot struct {
	pos    snapshot.Position
	docs   map[string]map[string][]byte
	stamps map[string]map[string]uint64
	fail   map[string]error
	shapes map[string]int
}

func (s *sourceSnapshot) Position() snapshot.Position { return s.pos }

// Scan sends the collection's documents in id byte order.
func (s *sourceSnapshot) Scan(ctx context.Context, collection string, fn func(snapshot.Document) error) error {
	_, err := s.ScanSince(ctx, collection, nil, fn)
	return err
}

// ScanSince sends the collection's documents in id byte order, each row not written
// since the snapshot at since with a nil body.
func (s *sourceSnapshot) ScanSince(ctx context.Context, collection string, since *snapshot.Position, fn func(snapshot.Document) error) (snapshot.LayerMode, error) {
	docs, ok := s.docs[collection]
	if !ok {
		return snapshot.LayerMode{}, fmt.Errorf("collection %s: no such collection: %w", collection, snapshot.ErrSource)
	}
	if err := s.fail[collection]; err != nil {
		return snapshot.LayerMode{}, fmt.Errorf("collection %s: %w", collection, err)
	}
	mode := snapshot.ModeRowVersion
	if since != nil && since.Definitions[collection] != s.pos.Definitions[collection] {
		mode, since = snapshot.ContentMode("the collection's definition changed"), nil
	}
	for _, id := range slices.Sorted(maps.Keys(docs)) {
		if err := ctx.Err(); err != nil {
			return snapshot.LayerMode{}, err
		}
		d := snapshot.Document{ID: id}
		if since == nil || s.stamps[collection][id] > since.LSN {
			d.Body = render(docs[id], s.shapes[collection])
		}
		if err := fn(d); err != nil {
			return snapshot.LayerMode{}, err
		}
	}
	return mode, nil
}

func (s *sourceSnapshot) Close(context.Context) error { return nil }

// BaseChunk is how many documents a chunk of a base read beside the stream holds
// (OpenBase).
const BaseChunk = 3

var (
	_ snapshot.BaseOpener      = (*Source)(nil)
	_ snapshot.BaseSharer      = (*Source)(nil)
	_ snapshot.ChunkedSnapshot = (*chunkedSnapshot)(nil)
	_ snapshot.PartedSnapshot  = (*chunkedSnapshot)(nil)
)

// OpenBase opens a base of collection read beside the stream in chunks, as
// pgsource's are (snapshot.BaseOpener): its position is the source's now, and each
// chunk of BaseChunk documents is read from the source as it is when the chunk
// begins, BetweenChunks called before each but the first.
func (s *Source) OpenBase(ctx context.Context, collection string) (snapshot.SourceSnapshot, error) {
	snap, err := s.Open(ctx)
	if err != nil {
		return nil, err
	}
	return &chunkedSnapshot{sourceSnapshot: snap.(*sourceSnapshot), src: s, collection: collection}, nil
}

// ResumeBase goes on with a base read at at after the id after (snapshot.BaseResumer);
// it cannot when the collection's definition is no longer at's.
func (s *Source) ResumeBase(ctx context.Context, collection string, at snapshot.Position, after string) (snapshot.SourceSnapshot, error) {
	snap, err := s.Open(ctx)
	if err != nil {
		return nil, err
	}
	ss := snap.(*sourceSnapshot)
	if ss.pos.Definitions[collection] != at.Definitions[collection] {
		return nil, fmt.Errorf("%w: the collection's definition changed", snapshot.ErrCannotResume)
	}
	ss.pos = at
	return &chunkedSnapshot{sourceSnapshot: ss, src: s, collection: collection, resumed: true, after: after}, nil
}

// ReadBasePart reads a part of a base read at at, the ids after after through
// through, as ResumeBase goes on with one (snapshot.BaseSharer).
func (s *Source) ReadBasePart(ctx context.Context, collection string, at snapshot.Position, after, through string) (snapshot.SourceSnapshot, error) {
	snap, err := s.ResumeBase(ctx, collection, at, after)
	if err != nil {
		return nil, err
	}
	snap.(*chunkedSnapshot).through = through
	return snap, nil
}

// BaseParts cuts the collection, as the source holds it now, into parts of rows ids
// each (snapshot.PartedSnapshot); a base read on from an earlier one (ResumeBase,
// ReadBasePart) is not cut.
func (c *chunkedSnapshot) BaseParts(_ context.Context, collection string, rows int64) ([]string, snapshot.LayerMode, error) {
	if c.resumed || collection != c.collection || rows <= 0 {
		return nil, snapshot.ModeRowVersion, nil
	}
	c.src.mu.Lock()
	ids := slices.Sorted(maps.Keys(c.src.docs[collection]))
	c.src.mu.Unlock()
	var cuts []string
	for i := int(rows); i < len(ids); i += int(rows) {
		cuts = append(cuts, ids[i-1])
	}
	return cuts, snapshot.ModeRowVersion, nil
}

// chunkedSnapshot is a base's snapshot read in chunks from the live source.
type chunkedSnapshot struct {
	*sourceSnapshot
	src        *Source
	collection string
	resumed    bool   // read on from an earlier read
	after      string // the last id an earlier read sent; "" for none
	through    string // the last id to send, for a part; "" for all
	onChunk    func(ctx context.Context, last string) error
}

// OnChunk sets fn, called as each chunk but the last ends.
func (c *chunkedSnapshot) OnChunk(fn func(ctx context.Context, last string) error) { c.onChunk = fn }

// ScanSince sends the collection's documents after c.after in chunks, each as the
// source holds it when the chunk begins; the collection's definition must stay the
// base's.
func (c *chunkedSnapshot) ScanSince(ctx context.Context, collection string, since *snapshot.Position, fn func(snapshot.Document) error) (snapshot.LayerMode, error) {
	if since != nil || collection != c.collection {
		return c.sourceSnapshot.ScanSince(ctx, collection, since, fn)
	}
	last := c.after
	for first := true; ; first = false {
		if !first && c.src.BetweenChunks != nil {
			c.src.BetweenChunks()
		}
		chunk, err := c.src.chunk(collection, last, c.pos.Definitions[collection])
		if err != nil {
			return snapshot.LayerMode{}, err
		}
		if c.through != "" {
			if end := slices.IndexFunc(chunk, func(d snapshot.Document) bool { return d.ID > c.through }); end >= 0 {
				chunk = chunk[:end]
			}
		}
		for _, d := range chunk {
			if err := fn(d); err != nil {
				return snapshot.LayerMode{}, err
			}
			last = d.ID
		}
		if len(chunk) < BaseChunk {
			return snapshot.ModeRowVersion, nil
		}
		if c.onChunk != nil {
			if err := c.onChunk(ctx, last); err != nil {
				return snapshot.LayerMode{}, err
			}
		}
	}
}

// chunk returns up to BaseChunk documents of collection after the id after, rendered,
// as the source holds them now; an error when the collection's definition is no
// longer def, or its scans fail.
func (s *Source) chunk(collection, after, def string) ([]snapshot.Document, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fail[collection]; err != nil {
		return nil, fmt.Errorf("collection %s: %w", collection, err)
	}
	if fmt.Sprint(s.shapes[collection]) != def {
		return nil, fmt.Errorf("%w: the definition of %s changed while its base was read", snapshot.ErrSource, collection)
	}
	var out []snapshot.Document
	for _, id := range slices.Sorted(maps.Keys(s.docs[collection])) {
		if id > after && len(out) < BaseChunk {
			out = append(out, snapshot.Document{ID: id, Body: render(s.docs[collection][id], s.shapes[collection])})
		}
	}
	return out, nil
}
