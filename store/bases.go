package store

import (
	"context"
	"encoding/json"
	"fmt"

	"cloud.google.com/go/bigtable"

	"github.com/snapflip/snapflip/snapshot"
)

// The record of each collection's base beside the stream is the row
// b#<dataset>#<collection>, one cell c:base holding snapshot.BaseStatus as JSON; the
// next record of the collection replaces it (family c keeps one cell).
const colBase = "base"

var _ snapshot.BaseStore = (*Store)(nil)

func basePrefix(dataset string) string { return "b#" + escapeComponent(dataset) + "#" }

// RecordBase stores b as its collection's record (snapshot.BaseStore).
func (s *Store) RecordBase(ctx context.Context, dataset string, b snapshot.BaseStatus) error {
	ctx, cancel := s.op(ctx)
	defer cancel()
	if b.Collection == "" {
		return fmt.Errorf("%w base record of dataset %s: no collection", snapshot.ErrInvalid, dataset)
	}
	body, err := json.Marshal(b)
	if err != nil {
		return err
	}
	mut := bigtable.NewMutation()
	mut.Set(famControl, colBase, bigtable.Now(), body)
	if err := s.tbl.Apply(ctx, basePrefix(dataset)+escapeComponent(b.Collection), mut); err != nil {
		return s.wrap(err, "record the base of %s of dataset %s", b.Collection, dataset)
	}
	return nil
}

// ListBases returns the dataset's base records, by collection name: the row keys
// sort as the names do.
func (s *Store) ListBases(ctx context.Context, dataset string) ([]snapshot.BaseStatus, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	var out []snapshot.BaseStatus
	var derr error
	err := s.tbl.ReadRows(ctx, bigtable.PrefixRange(basePrefix(dataset)), func(r bigtable.Row) bool {
		for _, c := range r[famControl] {
			if c.Column != famControl+":"+colBase {
				continue
			}
			var b snapshot.BaseStatus
			if err := json.Unmarshal(c.Value, &b); err != nil {
				derr = fmt.Errorf("base record %s: %w", r.Key(), err)
				return false
			}
			out = append(out, b)
		}
		return true
	}, bigtable.RowFilter(bigtable.LatestNFilter(1)))
	if err != nil {
		return nil, s.wrap(err, "list the bases of dataset %s", dataset)
	}
	return out, derr
}
