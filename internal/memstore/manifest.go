package memstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/snapflip/snapflip/snapshot"
)

// CreateManifest stores a new manifest, or returns ErrConflict if one exists.
func (s *Store) CreateManifest(ctx context.Context, m snapshot.Manifest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkVersion("create", m.Dataset, m.Version); err != nil {
		return err
	}
	body, err := snapshot.EncodeManifest(m)
	if err != nil {
		return fmt.Errorf("encode manifest %s: %w", m.Version, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fault(OpCreateManifest)
	byVersion := s.manifests[m.Dataset]
	if byVersion == nil {
		byVersion = map[snapshot.Version][]byte{}
		s.manifests[m.Dataset] = byVersion
	}
	cur, exists := byVersion[m.Version]
	if !exists && f != Refused {
		byVersion[m.Version] = body
		cur = body
	}
	if f != 0 {
		// A failed call, decided as Bigtable's store decides it: by re-reading. The
		// manifest as this create would have written it is a success, whoever wrote it.
		if got := decodeManifest(cur); f.reread() == nil && cur != nil && got.State == m.State && got.Writer == m.Writer && got.StartedAt.Equal(m.StartedAt) {
			return nil
		}
		return fmt.Errorf("create manifest %s: %w", m.Version, errInjected)
	}
	if exists {
		return fmt.Errorf("create manifest %s: %w: it exists", m.Version, snapshot.ErrConflict)
	}
	return nil
}

// UpdateManifest writes m if the stored state is from, else returns ErrConflict (or
// ErrNotFound when there is no such manifest).
func (s *Store) UpdateManifest(ctx context.Context, m snapshot.Manifest, from snapshot.State) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkVersion("update", m.Dataset, m.Version); err != nil {
		return err
	}
	if !snapshot.CanTransition(from, m.State) && from != m.State {
		return fmt.Errorf("%w manifest transition %s → %s", snapshot.ErrInvalid, from, m.State)
	}
	body, err := snapshot.EncodeManifest(m)
	if err != nil {
		return fmt.Errorf("encode manifest %s: %w", m.Version, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fault(OpUpdateManifest)
	cur, ok := s.manifests[m.Dataset][m.Version]
	matched := ok && decodeManifest(cur).State == from
	if matched && f != Refused {
		s.manifests[m.Dataset][m.Version] = body
		cur = body
	}
	if f != 0 {
		// A failed call, decided by re-reading as Bigtable's store does: the manifest
		// in m's state is a success, whoever moved it there.
		if f.reread() == nil && ok && decodeManifest(cur).State == m.State {
			return nil
		}
		return fmt.Errorf("update manifest %s to %s: %w", m.Version, m.State, errInjected)
	}
	switch {
	case !ok:
		return fmt.Errorf("update manifest %s %s → %s: manifest %s: %w", m.Version, from, m.State, m.Version, snapshot.ErrNotFound)
	case !matched:
		return fmt.Errorf("update manifest %s %s → %s: it is %s: %w", m.Version, from, m.State, decodeManifest(cur).State, snapshot.ErrConflict)
	}
	return nil
}

// checkVersion refuses a version that is not one, as Bigtable's store does: its
// manifest has no row key.
func checkVersion(what, dataset string, v snapshot.Version) error {
	if _, err := snapshot.ParseVersion(string(v)); err != nil {
		return fmt.Errorf("%s manifest of %s: %w", what, dataset, err)
	}
	return nil
}

func decodeManifest(b []byte) snapshot.Manifest {
	m, _ := snapshot.DecodeManifest(b) // written by this store
	return m
}

// ReadManifest returns a manifest, or ErrNotFound.
func (s *Store) ReadManifest(ctx context.Context, dataset string, v snapshot.Version) (snapshot.Manifest, error) {
	if err := checkVersion("read", dataset, v); err != nil {
		return snapshot.Manifest{}, err
	}
	unlock, err := s.read(ctx)
	if err != nil {
		return snapshot.Manifest{}, fmt.Errorf("read manifest %s: %w", v, err)
	}
	defer unlock()
	body, ok := s.manifests[dataset][v]
	if !ok {
		return snapshot.Manifest{}, fmt.Errorf("manifest %s: %w", v, snapshot.ErrNotFound)
	}
	return decodeManifest(body), nil
}

// sorted returns the dataset's manifests in row order (by the millis of their
// version, then its client id), oldest first; the caller holds mu.
func (s *Store) sorted(dataset string) []snapshot.Manifest {
	var out []snapshot.Manifest
	for _, body := range s.manifests[dataset] {
		out = append(out, decodeManifest(body))
	}
	slices.SortFunc(out, func(a, b snapshot.Manifest) int { return compareVersions(a.Version, b.Version) })
	return out
}

// compareVersions orders versions as their manifests' rows sort.
func compareVersions(a, b snapshot.Version) int {
	if c := a.Millis() - b.Millis(); c != 0 {
		if c < 0 {
			return -1
		}
		return 1
	}
	switch {
	case a.ClientID() < b.ClientID():
		return -1
	case a.ClientID() > b.ClientID():
		return 1
	}
	return 0
}

// ListManifests returns the dataset's manifests, oldest first.
func (s *Store) ListManifests(ctx context.Context, dataset string) ([]snapshot.Manifest, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sorted(dataset), nil
}

// RecentManifests returns up to limit of the dataset's manifests made before version
// before ("" for the newest), newest first.
func (s *Store) RecentManifests(ctx context.Context, dataset string, before snapshot.Version, limit int) ([]snapshot.Manifest, error) {
	if limit < 1 {
		return nil, fmt.Errorf("%w recent manifests: limit %d must be positive", snapshot.ErrInvalid, limit)
	}
	if before != "" {
		if err := checkVersion("recent", dataset, before); err != nil {
			return nil, err
		}
	}
	all, err := s.ListManifests(ctx, dataset)
	if err != nil {
		return nil, err
	}
	var out []snapshot.Manifest
	for i := len(all) - 1; i >= 0 && len(out) < limit; i-- {
		if before == "" || compareVersions(all[i].Version, before) < 0 {
			out = append(out, all[i])
		}
	}
	return out, nil
}

// ManifestsInState returns the dataset's manifests in state st made at or after
// since (the zero time for all), oldest first.
func (s *Store) ManifestsInState(ctx context.Context, dataset string, st snapshot.State, since time.Time) ([]snapshot.Manifest, error) {
	all, err := s.ListManifests(ctx, dataset)
	if err != nil {
		return nil, err
	}
	var out []snapshot.Manifest
	for _, m := range all {
		if m.State == st && (since.IsZero() || m.Version.Millis() >= max(since.UnixMilli(), 0)) {
			out = append(out, m)
		}
	}
	return out, nil
}
