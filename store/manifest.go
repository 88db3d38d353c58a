package store

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/snapflip/snapflip/snapshot"
)

// A manifest row m#<dataset>#<millis>#<uuid> holds m:state, the state alone (compared by
// conditional writes), and m:manifest, the whole manifest as JSON.
const (
	colState    = "state"
	colManifest = "manifest"
)

func manifestMutation(m snapshot.Manifest) (*bigtable.Mutation, error) {
	body, err := snapshot.EncodeManifest(m)
	if err != nil {
		return nil, fmt.Errorf("encode manifest %s: %w", m.Version, err)
	}
	ts := bigtable.Now()
	mut := bigtable.NewMutation()
	mut.DeleteCellsInColumn(famManifest, colState)
	mut.Set(famManifest, colState, ts, []byte(m.State))
	mut.DeleteCellsInColumn(famManifest, colManifest)
	mut.Set(famManifest, colManifest, ts, body)
	return mut, nil
}

// CreateManifest stores a new manifest, or returns ErrConflict if one exists.
func (s *Store) CreateManifest(ctx context.Context, m snapshot.Manifest) error {
	ctx, cancel := s.op(ctx)
	defer cancel()
	key, err := manifestKey(m.Dataset, m.Version)
	if err != nil {
		return fmt.Errorf("create %w", err)
	}
	mut, err := manifestMutation(m)
	if err != nil {
		return err
	}
	var exists bool
	cond := bigtable.NewCondMutation(column(famManifest, colState), nil, mut)
	if err := s.tbl.Apply(ctx, key, cond, bigtable.GetCondMutationResult(&exists)); err != nil {
		rctx, cancelRead := s.reread(ctx)
		got, rerr := s.ReadManifest(rctx, m.Dataset, m.Version)
		cancelRead()
		if rerr == nil && got.State == m.State && got.Writer == m.Writer && got.StartedAt.Equal(m.StartedAt) {
			return nil
		}
		return s.wrap(err, "create manifest %s", m.Version)
	}
	if exists {
		return fmt.Errorf("create manifest %s: %w: it exists", m.Version, snapshot.ErrConflict)
	}
	return nil
}

// UpdateManifest writes m if the stored state is from, else returns ErrConflict (or
// ErrNotFound when there is no such manifest).
func (s *Store) UpdateManifest(ctx context.Context, m snapshot.Manifest, from snapshot.State) error {
	ctx, cancel := s.op(ctx)
	defer cancel()
	if !snapshot.CanTransition(from, m.State) && from != m.State {
		return fmt.Errorf("%w manifest transition %s → %s", snapshot.ErrInvalid, from, m.State)
	}
	key, err := manifestKey(m.Dataset, m.Version)
	if err != nil {
		return fmt.Errorf("update %w", err)
	}
	mut, err := manifestMutation(m)
	if err != nil {
		return err
	}
	var matched bool
	cond := bigtable.NewCondMutation(valueEquals(famManifest, colState, []byte(from)), mut, nil)
	if err := s.tbl.Apply(ctx, key, cond, bigtable.GetCondMutationResult(&matched)); err != nil {
		rctx, cancelRead := s.reread(ctx)
		got, rerr := s.ReadManifest(rctx, m.Dataset, m.Version)
		cancelRead()
		if rerr == nil && got.State == m.State {
			return nil
		}
		return s.wrap(err, "update manifest %s to %s", m.Version, m.State)
	}
	if matched {
		return nil
	}
	got, err := s.ReadManifest(ctx, m.Dataset, m.Version)
	if err != nil {
		return fmt.Errorf("update manifest %s %s → %s: %w", m.Version, from, m.State, err)
	}
	return fmt.Errorf("update manifest %s %s → %s: it is %s: %w", m.Version, from, m.State, got.State, snapshot.ErrConflict)
}

// ReadManifest returns a manifest, or ErrNotFound.
func (s *Store) ReadManifest(ctx context.Context, dataset string, v snapshot.Version) (snapshot.Manifest, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	key, err := manifestKey(dataset, v)
	if err != nil {
		return snapshot.Manifest{}, fmt.Errorf("read %w", err)
	}
	row, err := s.tbl.ReadRow(ctx, key, bigtable.RowFilter(column(famManifest, colManifest)))
	if status.Code(err) == codes.NotFound {
		// No table yet (nothing was ever synced): no manifest either.
		return snapshot.Manifest{}, fmt.Errorf("manifest %s: table %s not found: %w", v, s.cfg.Table, snapshot.ErrNotFound)
	}
	if err != nil {
		return snapshot.Manifest{}, s.wrap(err, "read manifest %s", v)
	}
	cells := row[famManifest]
	if len(cells) == 0 {
		return snapshot.Manifest{}, fmt.Errorf("manifest %s: %w", v, snapshot.ErrNotFound)
	}
	return decodeManifest(cells[0].Value)
}

func decodeManifest(b []byte) (snapshot.Manifest, error) {
	m, err := snapshot.DecodeManifest(b)
	if err != nil {
		return snapshot.Manifest{}, fmt.Errorf("decode manifest: %w", err)
	}
	return m, nil
}

// ListManifests returns the dataset's manifests, oldest first.
func (s *Store) ListManifests(ctx context.Context, dataset string) ([]snapshot.Manifest, error) {
	return s.listManifests(ctx, dataset, bigtable.PrefixRange(manifestPrefix(dataset)),
		column(famManifest, colManifest))
}

// RecentManifests returns up to limit of the dataset's manifests made before version
// before ("" for the newest; a manifest's row sorts by when its version was made),
// newest first. It reads those rows alone, in reverse: listing the newest versions
// costs the same after a million versions as after ten.
func (s *Store) RecentManifests(ctx context.Context, dataset string, before snapshot.Version, limit int) ([]snapshot.Manifest, error) {
	if limit < 1 {
		return nil, fmt.Errorf("%w recent manifests: limit %d must be positive", snapshot.ErrInvalid, limit)
	}
	prefix := manifestPrefix(dataset)
	end := prefixEnd(prefix)
	if before != "" {
		var err error
		if end, err = manifestKey(dataset, before); err != nil {
			return nil, fmt.Errorf("recent %w", err)
		}
	}
	return s.listManifests(ctx, dataset, bigtable.NewRange(prefix, end),
		column(famManifest, colManifest), bigtable.ReverseScan(), bigtable.LimitRows(int64(limit)))
}

// ManifestsInState returns the dataset's manifests in state st made at or after
// since (the zero time for all), oldest first. Bigtable compares each row's m:state
// and sends only the matching manifests.
func (s *Store) ManifestsInState(ctx context.Context, dataset string, st snapshot.State, since time.Time) ([]snapshot.Manifest, error) {
	prefix := manifestPrefix(dataset)
	start := prefix
	if !since.IsZero() {
		start = fmt.Sprintf("%s%013d", prefix, max(since.UnixMilli(), 0))
	}
	inState := bigtable.ConditionFilter(valueEquals(famManifest, colState, []byte(st)),
		column(famManifest, colManifest), bigtable.BlockAllFilter())
	return s.listManifests(ctx, dataset, bigtable.NewRange(start, prefixEnd(prefix)), inState)
}

// listManifests decodes the manifests of the rows read from rr with filter and opts,
// in the order read.
func (s *Store) listManifests(ctx context.Context, dataset string, rr bigtable.RowSet, filter bigtable.Filter, opts ...bigtable.ReadOption) ([]snapshot.Manifest, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	var out []snapshot.Manifest
	var derr error
	err := s.tbl.ReadRows(ctx, rr, func(r bigtable.Row) bool {
		cells := r[famManifest]
		if len(cells) == 0 {
			return true
		}
		m, err := decodeManifest(cells[0].Value)
		if err != nil {
			derr = fmt.Errorf("row %s: %w", r.Key(), err)
			return false
		}
		out = append(out, m)
		return true
	}, append(opts, bigtable.RowFilter(filter))...)
	if status.Code(err) == codes.NotFound {
		return nil, nil // no table yet: nothing was ever synced
	}
	if err != nil {
		return nil, s.wrap(err, "list manifests of dataset %s", dataset)
	}
	return out, derr
}
