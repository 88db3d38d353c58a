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
}

var _ snapshot.Source = (*Source)(nil)
var _ snapshot.DeltaSnapshot = (*sourceSnapshot)(nil)

// NewSource returns a source of the named collections, empty.
func NewSource(collections ...string) *Source {
	s := &Source{collections: collections, docs: map[string]map[string][]byte{}, stamps: map[string]map[string]uint64{},
		lsn: 1, fail: map[string]error{}}
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
		out[id] = string(b)
	}
	return out
}

// Collections returns the collections' names, in order.
func (s *Source) Collections() []string { return slices.Clone(s.collections) }

// Open takes a snapshot of every collection.
func (s *Source) Open(ctx context.Context) (snapshot.SourceSnapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := &sourceSnapshot{pos: snapshot.Position{LSN: s.lsn, Snapshot: fmt.Sprintf("%d:%d:", s.lsn, s.lsn)},
		docs: map[string]map[string][]byte{}, stamps: map[string]map[string]uint64{}, fail: maps.Clone(s.fail)}
	for c, docs := range s.docs {
		snap.docs[c], snap.stamps[c] = maps.Clone(docs), maps.Clone(s.stamps[c])
	}
	return snap, nil
}

type sourceSnapshot struct {
	pos    snapshot.Position
	docs   map[string]map[string][]byte
	stamps map[string]map[string]uint64
	fail   map[string]error
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
	for _, id := range slices.Sorted(maps.Keys(docs)) {
		if err := ctx.Err(); err != nil {
			return snapshot.LayerMode{}, err
		}
		d := snapshot.Document{ID: id}
		if since == nil || s.stamps[collection][id] > since.LSN {
			d.Body = slices.Clone(docs[id])
		}
		if err := fn(d); err != nil {
			return snapshot.LayerMode{}, err
		}
	}
	return snapshot.ModeRowVersion, nil
}

func (s *sourceSnapshot) Close(context.Context) error { return nil }
