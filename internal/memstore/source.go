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
	snap := &sourceSnapshot{pos: snapshot.Position{LSN: s.lsn, Snapshot: fmt.Sprintf("%d:%d:", s.lsn, s.lsn), Definitions: map[string]string{}},
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
