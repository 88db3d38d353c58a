package snapshot

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// ReadStore is what the read side needs from storage.
type ReadStore interface {
	// ReadPointer returns the pointer, or ErrNoVersion when nothing is published.
	ReadPointer(ctx context.Context, dataset string) (Pointer, error)
	// ReadManifest returns a manifest, or ErrNotFound.
	ReadManifest(ctx context.Context, dataset string, v Version) (Manifest, error)
	// GetDocument returns one document of a version, or ErrNotFound.
	GetDocument(ctx context.Context, dataset string, v Version, collection, id string) ([]byte, error)
}

// View is one version as a reader sees it: every answer made from a View comes from
// that version alone.
type View struct {
	Version  Version
	Manifest Manifest
}

// HasCollection reports whether the version holds the collection.
func (v View) HasCollection(name string) bool {
	_, ok := v.Manifest.Collections[name]
	return ok
}

// ResolverConfig tunes a Resolver.
type ResolverConfig struct {
	// Refresh is how long a pointer read is reused; default 1s.
	Refresh time.Duration
	// Timeout bounds one pointer refresh; default 5s.
	Timeout time.Duration
	// MaxStale is how long the last good pointer keeps being served while refreshes
	// fail; default 1 minute. Past it, reads fail and the API is not ready.
	MaxStale time.Duration
}

// DefaultResolverConfig returns the defaults.
func DefaultResolverConfig() ResolverConfig {
	return ResolverConfig{Refresh: time.Second, Timeout: 5 * time.Second, MaxStale: time.Minute}
}

// Resolver answers reads through the pointer. It reads the pointer at most once per
// Refresh interval, with one refresh in flight at a time however many requests wait,
// and caches manifests by version (a version's counts never change).
type Resolver struct {
	dataset string
	store   ReadStore
	cfg     ResolverConfig
	now     func() time.Time

	flight singleflight.Group

	mu        sync.Mutex
	ptr       Pointer
	ptrErr    error
	fetchedAt time.Time // when ptr was last read successfully
	triedAt   time.Time // when the pointer was last read, successfully or not

	mmu       sync.Mutex
	manifests map[Version]Manifest // bounded by maxCachedManifests
}

// maxCachedManifests bounds the manifest cache; past it, an arbitrary half is dropped.
const maxCachedManifests = 512

// NewResolver returns a Resolver for the dataset. now defaults to time.Now.
func NewResolver(dataset string, store ReadStore, cfg ResolverConfig, now func() time.Time) *Resolver {
	if now == nil {
		now = time.Now
	}
	def := DefaultResolverConfig()
	if cfg.Refresh <= 0 {
		cfg.Refresh = def.Refresh
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = def.Timeout
	}
	if cfg.MaxStale <= 0 {
		cfg.MaxStale = def.MaxStale
	}
	return &Resolver{dataset: dataset, store: store, cfg: cfg, now: now, manifests: map[Version]Manifest{}}
}

// Pointer returns the pointer as of at most one refresh interval ago. It returns
// ErrNoVersion when nothing is published, or the storage error when the pointer could
// not be read and the last good one is older than MaxStale.
func (r *Resolver) Pointer(ctx context.Context) (Pointer, error) {
	r.mu.Lock()
	fresh := !r.triedAt.IsZero() && r.now().Sub(r.triedAt) < r.cfg.Refresh
	ptr, err := r.ptr, r.ptrErr
	r.mu.Unlock()
	if fresh {
		return r.staleOK(ptr, err)
	}
	ch := r.flight.DoChan("pointer", func() (any, error) {
		// A caller that saw a stale pointer may start its flight just after another
		// flight ended: re-check, so that one interval still means one read.
		r.mu.Lock()
		fresh := !r.triedAt.IsZero() && r.now().Sub(r.triedAt) < r.cfg.Refresh
		r.mu.Unlock()
		if fresh {
			return nil, nil
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Timeout)
		defer cancel()
		p, err := r.store.ReadPointer(rctx, r.dataset)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.triedAt = r.now()
		r.ptrErr = err
		if err == nil {
			r.ptr, r.fetchedAt = p, r.triedAt
		}
		return nil, nil
	})
	select {
	case <-ch:
	case <-ctx.Done():
		return Pointer{}, ctx.Err()
	}
	r.mu.Lock()
	ptr, err = r.ptr, r.ptrErr
	r.mu.Unlock()
	return r.staleOK(ptr, err)
}

// staleOK decides whether a failed refresh may still be answered by the last good
// pointer. Callers hold no lock.
func (r *Resolver) staleOK(ptr Pointer, err error) (Pointer, error) {
	if err == nil {
		return ptr, nil
	}
	if errors.Is(err, ErrNoVersion) {
		return Pointer{}, err
	}
	r.mu.Lock()
	fetchedAt := r.fetchedAt
	r.mu.Unlock()
	if !fetchedAt.IsZero() && r.now().Sub(fetchedAt) < r.cfg.MaxStale {
		return ptr, nil
	}
	return Pointer{}, fmt.Errorf("read pointer: %w", err)
}

// Current returns a View of the current version.
func (r *Resolver) Current(ctx context.Context) (View, error) {
	p, err := r.Pointer(ctx)
	if err != nil {
		return View{}, err
	}
	return r.View(ctx, p.Version)
}

// View returns a View of the given version, or an error wrapping ErrNotFound when the
// version does not exist, has expired, or is not complete.
func (r *Resolver) View(ctx context.Context, v Version) (View, error) {
	r.mmu.Lock()
	m, ok := r.manifests[v]
	r.mmu.Unlock()
	if ok {
		return View{Version: v, Manifest: m}, nil
	}
	m, err := r.store.ReadManifest(ctx, r.dataset, v)
	if err != nil {
		return View{}, fmt.Errorf("version %s: %w", v, err)
	}
	if !m.State.Servable() {
		return View{}, fmt.Errorf("version %s is %s: %w", v, m.State, ErrNotFound)
	}
	r.mmu.Lock()
	if len(r.manifests) >= maxCachedManifests {
		for k := range r.manifests {
			if len(r.manifests) < maxCachedManifests/2 {
				break
			}
			delete(r.manifests, k)
		}
	}
	r.manifests[v] = m
	r.mmu.Unlock()
	return View{Version: v, Manifest: m}, nil
}

// Get returns one document of the view's version, or an error wrapping ErrNotFound
// when the collection or the id is unknown.
func (r *Resolver) Get(ctx context.Context, view View, collection, id string) ([]byte, error) {
	if !view.HasCollection(collection) {
		return nil, fmt.Errorf("collection %q: %w", collection, ErrNotFound)
	}
	return r.store.GetDocument(ctx, r.dataset, view.Version, collection, id)
}

// Ready reports whether the pointer resolves now: nil, ErrNoVersion, or the error.
func (r *Resolver) Ready(ctx context.Context) error {
	_, err := r.Pointer(ctx)
	return err
}
