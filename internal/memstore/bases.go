package memstore

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/snapflip/snapflip/snapshot"
)

var _ snapshot.BaseStore = (*Store)(nil)

// RecordBase stores b as its collection's record (snapshot.BaseStore).
func (s *Store) RecordBase(ctx context.Context, dataset string, b snapshot.BaseStatus) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.Collection == "" {
		return fmt.Errorf("%w base record of dataset %s: no collection", snapshot.ErrInvalid, dataset)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bases[dataset] == nil {
		s.bases[dataset] = map[string]snapshot.BaseStatus{}
	}
	s.bases[dataset][b.Collection] = b
	return nil
}

// ListBases returns the dataset's base records, by collection name.
func (s *Store) ListBases(ctx context.Context, dataset string) ([]snapshot.BaseStatus, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	recs := s.bases[dataset]
	out := make([]snapshot.BaseStatus, 0, len(recs))
	for _, name := range slices.Sorted(maps.Keys(recs)) {
		out = append(out, recs[name])
	}
	return out, nil
}
