package resolver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/snapflip/snapflip/snapshot"
)

// ReadStore is what the read side needs from storage.
type ReadStore interface {
	// ReadPointer returns the pointer, or ErrNoVersion when nothing is published.
	ReadPointer(ctx context.Context, dataset string) (snapshot.Pointer, error)
	// ReadManifest returns a manifest, or ErrNotFound.
	ReadManifest(ctx context.Context, dataset string, v snapshot.Version) (snapshot.Manifest, error)
	// GetDocument returns one document through a chain (Manifest.Chain: the layers
	// holding the collection, newest first), or ErrNotFound.
	GetDocument(ctx context.Context, in snapshot.ChainRef, id string) ([]byte, error)
	snapshot.DocumentGetter
	// ScanPage returns up to limit documents through a chain whose ids sort after
	// after, in id order, and whether more follow.
	ScanPage(ctx context.Context, in snapshot.ChainRef, after string, limit int) ([]snapshot.Document, bool, error)
	// ScanEntries returns up to limit entries of an index (index.Collection) through
	// a chain whose ids are in span, in order, and whether more follow.
	ScanEntries(ctx context.Context, in snapshot.ChainRef, span snapshot.Span, limit int) ([]snapshot.Document, bool, error)
	// RecentManifests returns up to limit of the dataset's manifests made before
	// version before ("" for the newest), newest first.
	RecentManifests(ctx context.Context, dataset string, before snapshot.Version, limit int) ([]snapshot.Manifest, error)
}

// Config tunes a Resolver. A zero field takes its default
// (DefaultConfig).
type Config struct {
	// Refresh is how long a pointer read is reused; default 200ms.
	Refresh time.Duration
	// Timeout bounds one pointer refresh and one document fetch; default 5s.
	Timeout time.Duration
	// MaxStale is how long the last good pointer keeps being served while refreshes
	// fail; default 1 minute. Past it, reads fail and the API is not ready.
	MaxStale time.Duration
	// CacheSize is how many documents (and not-found answers) are cached, keyed by
	// (version, collection, id), which never go stale; default 100,000. Negative
	// turns the cache off.
	CacheSize int
	// Layers reads layers' fingerprint runs: a delta's changes (ChangedIDs), and
	// which ids a flip changed, to carry cached documents across it (carry.go). Nil
	// turns both off.
	Layers snapshot.LayerRuns
	// Demand, when set, is where waiters for a read-your-writes token ask the syncer
	// to look at the source now (Await). Nil: they wait for the syncer's own pace.
	Demand snapshot.DemandStore
	// MaxWaiters is the most requests that may wait for a token at once; past it,
	// Await answers ErrNotYetCovered at once. Default 10,000.
	MaxWaiters int
}

// DefaultConfig returns the defaults a zero field of Config takes
// (but Layers, which has none).
func DefaultConfig() Config {
	return Config{Refresh: 200 * time.Millisecond, Timeout: 5 * time.Second, MaxStale: time.Minute, CacheSize: 100_000,
		MaxWaiters: DefaultMaxWaiters}
}

// Validate reports the first bad value of c as an error naming its field: a negative
// duration or MaxWaiters (zero takes the default). A negative CacheSize is valid: no
// cache.
func (c Config) Validate() error {
	if c.MaxWaiters < 0 {
		return fmt.Errorf("%w resolver config: MaxWaiters %d is negative (0 takes the default)", snapshot.ErrInvalid, c.MaxWaiters)
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"Refresh", c.Refresh}, {"Timeout", c.Timeout}, {"MaxStale", c.MaxStale}} {
		if f.d < 0 {
			return fmt.Errorf("%w resolver config: %s %s is negative (0 takes the default)", snapshot.ErrInvalid, f.name, f.d)
		}
	}
	return nil
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	def := DefaultConfig()
	c.Refresh = cmp.Or(c.Refresh, def.Refresh)
	c.Timeout = cmp.Or(c.Timeout, def.Timeout)
	c.MaxStale = cmp.Or(c.MaxStale, def.MaxStale)
	c.CacheSize = cmp.Or(c.CacheSize, def.CacheSize)
	c.MaxWaiters = cmp.Or(c.MaxWaiters, def.MaxWaiters)
	return c
}

// Resolver answers reads through the pointer. It reads the pointer once per Refresh
// interval (Run), with one read in flight at a time however many requests wait, and
// caches manifests by version (a version's counts never change).
type Resolver struct {
	dataset string
	store   ReadStore
	cfg     Config
	now     func() time.Time

	ptr *pointerCache

	manifests *lru.Cache[snapshot.Version, snapshot.Manifest]
	docs      *lru.Cache[cacheKey, *cacheEntry] // nil when off
	carry     *lru.Cache[carryKey, *changeSet]
	fetch     *fetcher
	filters   *lru.Cache[filterKey, *filterEntry] // filter pages' ids (filter.go)

	hits, misses, carriedHits, filterHits, carriedFilterHits atomic.Int64

	waiting  atomic.Int64 // requests waiting for a token (Await)
	demand   *demander
	unhelped *unhelped // tokens a look at the source on demand did not cover
}

// maxCachedManifests bounds the manifest cache.
const maxCachedManifests = 1024

// maxCachedFilters bounds the filter cache: the ids of so many filter pages.
const maxCachedFilters = 10_000

// docKey names a document of one version (a fetch).
type docKey struct {
	v          snapshot.Version
	collection string
	id         string
}

// Doc is one document as the read side serves it: its bytes and an ETag, or a
// not-found answer (Missing), both cacheable forever under their version.
type Doc struct {
	Body    []byte
	ETag    string
	Missing bool
}

func newDoc(body []byte) Doc {
	return Doc{Body: body, ETag: fmt.Sprintf(`"%016x"`, xxhash.Sum64(body))}
}

// New returns a Resolver for the dataset. now defaults to time.Now. A zero field of
// cfg takes its default; a bad one is an error naming it (Config.Validate).
func New(dataset string, store ReadStore, cfg Config, now func() time.Time) (*Resolver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	cfg = cfg.withDefaults()
	r := &Resolver{dataset: dataset, store: store, cfg: cfg, now: now,
		fetch: &fetcher{store: store, dataset: dataset, timeout: cfg.Timeout}}
	r.ptr = &pointerCache{refresh: cfg.Refresh, timeout: cfg.Timeout, maxStale: cfg.MaxStale, now: now, read: r.readPointer}
	r.demand = &demander{gap: cfg.Refresh, now: now, base: r.ptr.context, waiting: r.waiting.Load}
	if cfg.Demand != nil {
		r.demand.raise = func(ctx context.Context) (uint64, error) { return cfg.Demand.RaiseDemand(ctx, dataset) }
	}
	r.unhelped = newUnhelped()
	r.manifests, _ = lru.New[snapshot.Version, snapshot.Manifest](maxCachedManifests)
	r.filters, _ = lru.New[filterKey, *filterEntry](maxCachedFilters)
	if cfg.CacheSize > 0 {
		r.docs, _ = lru.New[cacheKey, *cacheEntry](cfg.CacheSize)
	}
	if cfg.CacheSize > 0 && cfg.Layers != nil {
		r.carry, _ = lru.New[carryKey, *changeSet](maxCachedManifests)
	}
	return r, nil
}

// readPointer reads the pointer and, when it names a version not seen yet, loads that
// version's manifest and what its layers changed (the cache carry) before the pointer
// is served. Requests keep the old pointer meanwhile (a read in flight, within the
// staleness bound), so a flip never makes them wait on Bigtable, however many arrive
// at once. Loading is best effort: what fails here is read again on the request path,
// which reports it.
func (r *Resolver) readPointer(ctx context.Context) (snapshot.Pointer, error) {
	p, err := r.store.ReadPointer(ctx, r.dataset)
	if err != nil || p.Version == "" {
		return p, err
	}
	if _, ok := r.manifests.Peek(p.Version); ok {
		return p, nil
	}
	view, verr := r.View(ctx, p.Version)
	if verr != nil || r.carry == nil {
		return p, nil
	}
	for _, name := range view.Manifest.CollectionNames() {
		r.changes(ctx, p.Version, name)
	}
	return p, nil
}

// Pointer returns the pointer read at most one refresh interval ago, or at most one
// refresh interval plus one Timeout ago while a refresh is in flight. While pointer
// reads fail it answers at once, without waiting for Bigtable: the last good pointer
// until it is MaxStale old, then the storage error. It returns ErrNoVersion when
// nothing is published. A request that finds the pointer too old waits for one read,
// shared with every concurrent request; Run keeps that from happening on a live
// replica.
func (r *Resolver) Pointer(ctx context.Context) (snapshot.Pointer, error) {
	return r.ptr.get(ctx)
}

// Run reads the pointer once per refresh interval until ctx ends, so that a replica,
// however idle, resolves every read through a pointer younger than the interval
// without waiting for it (bounded staleness, docs/design.md). The API runs it for the life of the
// process; without it, the first request after a quiet spell waits for a read.
func (r *Resolver) Run(ctx context.Context) { r.ptr.run(ctx) }

// Current returns a View of the current version.
func (r *Resolver) Current(ctx context.Context) (snapshot.View, error) {
	p, err := r.Pointer(ctx)
	if err != nil {
		return snapshot.View{}, err
	}
	v, err := r.View(ctx, p.Version)
	if errors.Is(err, snapshot.ErrGone) {
		return snapshot.View{}, fmt.Errorf("%w: %v", snapshot.ErrCurrentExpired, err)
	}
	return v, err
}

// View returns a View of the given version, or an error wrapping ErrGone when the
// version was never written, is not complete, or has outlived its TTL.
func (r *Resolver) View(ctx context.Context, v snapshot.Version) (snapshot.View, error) {
	m, ok := r.manifests.Get(v)
	if ok && m.Expired(r.now()) {
		ok = false // it may have been refreshed in place since: read it again
	}
	if !ok {
		var err error
		m, err = r.store.ReadManifest(ctx, r.dataset, v)
		if errors.Is(err, snapshot.ErrNotFound) {
			return snapshot.View{}, fmt.Errorf("version %s does not exist or has expired: %w", v, snapshot.ErrGone)
		}
		if err != nil {
			return snapshot.View{}, fmt.Errorf("version %s: %w", v, err)
		}
		if !m.State.Servable() {
			return snapshot.View{}, fmt.Errorf("version %s is %s, never served: %w", v, m.State, snapshot.ErrGone)
		}
		if m.Format != snapshot.FormatFull && m.Format != snapshot.FormatLayered {
			return snapshot.View{}, fmt.Errorf("version %s has manifest format %d, written by a newer snapflip that this one cannot read: %w", v, m.Format, snapshot.ErrGone)
		}
		r.manifests.Add(v, m)
	}
	if m.Expired(r.now()) {
		return snapshot.View{}, fmt.Errorf("version %s expired at %s: %w", v, m.ExpiresAt(0).UTC().Format(time.RFC3339), snapshot.ErrGone)
	}
	return snapshot.View{Version: v, Manifest: m}, nil
}

// Get returns one document of the view's version, or an error wrapping ErrNotFound
// when the collection or the id is unknown.
func (r *Resolver) Get(ctx context.Context, view snapshot.View, collection, id string) (Doc, error) {
	if !view.HasCollection(collection) {
		return Doc{}, fmt.Errorf("collection %q: %w", collection, snapshot.ErrNotFound)
	}
	key := docKey{view.Version, collection, id}
	if d, ok := r.cached(ctx, key); ok {
		return r.found(d, collection, id)
	}
	body, found, err := r.fetch.get(ctx, key, view.Manifest.Chain(collection))
	if err != nil {
		return Doc{}, err
	}
	d := Doc{Missing: true}
	if found {
		d = newDoc(body)
	}
	r.cache(key, d)
	return r.found(d, collection, id)
}

func (r *Resolver) found(d Doc, collection, id string) (Doc, error) {
	if d.Missing {
		return Doc{}, fmt.Errorf("collection %s id %q: %w", collection, snapshot.Truncate(id, 200), snapshot.ErrNotFound)
	}
	return d, nil
}

// cached returns the cached answer for k: one cached at k's version, or at another
// version that the flips in between did not change it in (carry.go).
func (r *Resolver) cached(ctx context.Context, k docKey) (Doc, bool) {
	if r.docs == nil {
		r.misses.Add(1)
		return Doc{}, false
	}
	if e, ok := r.docs.Get(cacheKey{k.collection, k.id}); ok && r.holdsAt(ctx, e, k) {
		r.hits.Add(1)
		return e.doc, true
	}
	r.misses.Add(1)
	return Doc{}, false
}

func (r *Resolver) cache(k docKey, d Doc) {
	if r.docs != nil {
		e := &cacheEntry{doc: d}
		e.at.Store(&k.v)
		r.docs.Add(cacheKey{k.collection, k.id}, e)
	}
}

// CacheStats returns the document cache's hits and misses so far.
func (r *Resolver) CacheStats() (hits, misses int64) { return r.hits.Load(), r.misses.Load() }

// CarriedHits returns how many hits were answers carried across a flip (included in
// CacheStats' hits).
func (r *Resolver) CarriedHits() int64 { return r.carriedHits.Load() }

// GetMany returns the documents of ids at the view's version, from the cache where it
// can and in one storage read for the rest, and the ids that have none, in request
// order. Every answer comes from the view's version.
func (r *Resolver) GetMany(ctx context.Context, view snapshot.View, collection string, ids []string) (map[string]Doc, []string, error) {
	if !view.HasCollection(collection) {
		return nil, nil, fmt.Errorf("collection %q: %w", collection, snapshot.ErrNotFound)
	}
	out := make(map[string]Doc, len(ids))
	var fetch []string
	for _, id := range ids {
		if _, dup := out[id]; dup {
			continue
		}
		if d, ok := r.cached(ctx, docKey{view.Version, collection, id}); ok {
			out[id] = d
		} else {
			fetch = append(fetch, id)
		}
	}
	if len(fetch) > 0 {
		got, err := r.store.GetDocuments(ctx, snapshot.ChainRef{Dataset: r.dataset, Chain: view.Manifest.Chain(collection), Collection: collection}, fetch)
		if err != nil {
			return nil, nil, err
		}
		for _, id := range fetch {
			d := Doc{Missing: true}
			if body, ok := got[id]; ok {
				d = newDoc(body)
			}
			out[id] = d
			r.cache(docKey{view.Version, collection, id}, d)
		}
	}
	var missing []string
	seen := map[string]bool{}
	for _, id := range ids {
		if out[id].Missing && !seen[id] {
			missing = append(missing, id)
			seen[id] = true
		}
		if out[id].Missing {
			delete(out, id)
		}
	}
	return out, missing, nil
}

// Page returns up to limit documents of a collection at the view's version whose ids
// sort after after, in id order, and whether more follow.
func (r *Resolver) Page(ctx context.Context, view snapshot.View, collection, after string, limit int) ([]snapshot.Document, bool, error) {
	if !view.HasCollection(collection) {
		return nil, false, fmt.Errorf("collection %q: %w", collection, snapshot.ErrNotFound)
	}
	return r.store.ScanPage(ctx, snapshot.ChainRef{Dataset: r.dataset, Chain: view.Manifest.Chain(collection), Collection: collection}, after, limit)
}

// Versions returns up to limit of the dataset's versions made before version before
// ("" for the newest), newest first.
func (r *Resolver) Versions(ctx context.Context, before snapshot.Version, limit int) ([]snapshot.Manifest, error) {
	return r.store.RecentManifests(ctx, r.dataset, before, limit)
}

// ListHistory returns the audit trail, newest first, when the store keeps one.
func (r *Resolver) ListHistory(ctx context.Context, limit int) ([]snapshot.AuditEntry, error) {
	if a, ok := r.store.(snapshot.AuditStore); ok {
		return a.ListAudit(ctx, r.dataset, limit)
	}
	return nil, nil
}

// ListBases returns the records of the dataset's bases built beside the stream of
// versions, when the store keeps them.
func (r *Resolver) ListBases(ctx context.Context) ([]snapshot.BaseStatus, error) {
	if b, ok := r.store.(snapshot.BaseStore); ok {
		return b.ListBases(ctx, r.dataset)
	}
	return nil, nil
}

// Manifest returns one version's manifest whatever its state, or ErrNotFound.
func (r *Resolver) Manifest(ctx context.Context, v snapshot.Version) (snapshot.Manifest, error) {
	return r.store.ReadManifest(ctx, r.dataset, v)
}

// PointerAge returns how long ago the last good pointer read was sent, or -1 before
// one.
func (r *Resolver) PointerAge() time.Duration { return r.ptr.age() }

// Ready reports whether the pointer resolves now: nil, ErrNoVersion, or the error.
func (r *Resolver) Ready(ctx context.Context) error {
	_, err := r.Pointer(ctx)
	return err
}

func isNotFound(err error) bool { return errors.Is(err, snapshot.ErrNotFound) }
