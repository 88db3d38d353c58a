package api

import (
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/snapflip/snapflip/snapshot"
)

type collectionInfo struct {
	Name string `json:"name"`
	// Count and Bytes are absent for a collection the caller reads through a row
	// scope: they would tell it of documents outside it.
	Count  *int64 `json:"count,omitempty"`
	Bytes  *int64 `json:"bytes,omitempty"`
	Scoped bool   `json:"scoped,omitempty"`
	// Held, for a held collection, says where it stands: it is served at an earlier
	// position than the version's while its new base is built.
	Held *HeldInfo `json:"held,omitempty"`
}

// collections answers GET /v1/collections.
func (s *Server) collections(w http.ResponseWriter, r *http.Request) error {
	view, pinned, err := s.view(r)
	if err != nil {
		return err
	}
	out := struct {
		Version     snapshot.Version `json:"version"`
		Collections []collectionInfo `json:"collections"`
	}{Version: view.Version, Collections: []collectionInfo{}}
	names, whole, _ := s.readable(r, view.Manifest.CollectionNames())
	for _, name := range names {
		c := view.Manifest.Collections[name]
		if !whole[name] {
			out.Collections = append(out.Collections, collectionInfo{Name: name, Scoped: true, Held: heldInfo(c)})
			continue
		}
		out.Collections = append(out.Collections, collectionInfo{Name: name, Count: &c.Rows, Bytes: &c.Bytes, Held: heldInfo(c)})
	}
	s.cacheHeaders(w, view, pinned)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// versionInfo is one version as the API lists it.
type versionInfo struct {
	Version     snapshot.Version `json:"version"`
	State       snapshot.State   `json:"state"`
	Current     bool             `json:"current"`
	Counts      map[string]int64 `json:"counts"`
	Source      sourceInfo       `json:"source"`
	Fence       uint64           `json:"token,omitempty"`
	Tick        int64            `json:"slot,omitempty"`
	Writer      string           `json:"writer"`
	StartedAt   time.Time        `json:"started_at"`
	SealedAt    *time.Time       `json:"sealed_at,omitempty"`
	PublishedAt *time.Time       `json:"published_at,omitempty"`
	ExpiresAt   *time.Time       `json:"expires_at,omitempty"`
	Reason      string           `json:"reason,omitempty"`
	// Format is the manifest's format: 0 a full copy, 2 layered.
	Format int `json:"format"`
	// Shape is VersionShape's; absent when unknown.
	Shape string `json:"shape,omitempty"`
	// ChainLength is the longest chain of layers a read of any collection consults
	// (1 for a full copy).
	ChainLength int `json:"chain_length"`
	// BytesWritten is what the publish sent to storage (0 when not recorded).
	BytesWritten int64 `json:"bytes_written"`
	// Parent is the version a layered version's deltas were computed against.
	Parent snapshot.Version `json:"parent,omitempty"`
	// SnapshotToken is the read-your-writes token of the snapshot the version was
	// read at (docs/freshness.md); absent when the source recorded none.
	SnapshotToken string `json:"snapshot_token,omitempty"`
	// Held names, per held collection, the token of the earlier position it
	// reflects (HeaderHeld); absent when none is held.
	Held map[string]string `json:"held,omitempty"`
}

// coversToken is the token of the newest snapshot the pointer's version is known to
// hold: its own, or a later one a sync that found nothing new recorded.
func coversToken(p snapshot.Pointer) string {
	return p.Covering().Token(p.Source.System)
}

// The shapes of a version (VersionShape).
const (
	ShapeFull      = "full"      // a full copy (format 0)
	ShapeBase      = "base"      // every collection that wrote a layer wrote a base
	ShapeDelta     = "delta"     // every collection that wrote a layer wrote a delta
	ShapeMixed     = "mixed"     // some collections wrote bases, some deltas
	ShapeUnchanged = "unchanged" // layered, but no collection wrote a layer
)

// VersionShape says what a version's publish wrote: ShapeFull for a full copy; for a
// layered version, by the kinds of the layers its collections wrote (Own.Kind),
// ShapeBase, ShapeDelta, ShapeMixed, or ShapeUnchanged when none wrote one. It is ""
// when not known: a layered version that recorded no collection yet (it failed or is
// writing), or a format this snapflip does not know.
func VersionShape(m snapshot.Manifest) string {
	switch m.Format {
	case snapshot.FormatFull:
		return ShapeFull
	case snapshot.FormatLayered:
	default:
		return ""
	}
	var recorded, base, delta bool
	for _, c := range m.Collections {
		if c.Own == nil {
			continue
		}
		recorded = true
		switch c.Own.Kind {
		case snapshot.LayerBase:
			base = true
		case snapshot.LayerDelta:
			delta = true
		}
	}
	switch {
	case base && delta:
		return ShapeMixed
	case base:
		return ShapeBase
	case delta:
		return ShapeDelta
	case recorded:
		return ShapeUnchanged
	}
	return ""
}

type sourceInfo struct {
	LSN        string `json:"lsn"`
	PgSnapshot string `json:"snapshot,omitempty"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func describeVersion(m snapshot.Manifest, current snapshot.Version) versionInfo {
	return versionInfo{
		Version: m.Version, State: m.State, Current: m.Version == current, Counts: m.Counts(),
		Source: sourceInfo{LSN: m.Source.String(), PgSnapshot: m.Source.PgSnapshot},
		Fence:  m.Fence, Tick: m.Tick, Writer: m.Writer, StartedAt: m.StartedAt,
		SealedAt: timePtr(m.SealedAt), PublishedAt: timePtr(m.PublishedAt), ExpiresAt: timePtr(m.ExpiresAt(0)),
		Reason: m.Reason,
		Format: m.Format, Shape: VersionShape(m), ChainLength: m.ChainLength(), BytesWritten: m.BytesWritten, Parent: m.Parent,
		SnapshotToken: m.Source.Token(m.Version), Held: heldTokens(m),
	}
}

// heldTokens returns, per held collection of m, the token of the position it
// reflects; nil when none is held.
func heldTokens(m snapshot.Manifest) map[string]string {
	var out map[string]string
	for _, name := range m.HeldCollections() {
		if out == nil {
			out = map[string]string{}
		}
		out[name] = m.Collections[name].Held.Source.Token("")
	}
	return out
}

// describeFor is describeVersion as the caller may see it: the counts of only the
// collections it reads whole, and no byte total when it reads any less than whole.
func (s *Server) describeFor(r *http.Request, m snapshot.Manifest, current snapshot.Version) versionInfo {
	info := describeVersion(m, current)
	names, whole, all := s.readable(r, m.CollectionNames())
	if all {
		return info
	}
	for name := range info.Counts {
		if !whole[name] {
			delete(info.Counts, name)
		}
	}
	for name := range info.Held {
		if !slices.Contains(names, name) {
			delete(info.Held, name)
		}
	}
	info.BytesWritten = 0
	return info
}

// pointerOrNone returns the pointer, or a zero one when nothing is published.
func (s *Server) pointerOrNone(r *http.Request) (snapshot.Pointer, error) {
	p, err := s.reader.Pointer(r.Context())
	if errors.Is(err, snapshot.ErrNoVersion) {
		return snapshot.Pointer{}, nil
	}
	return p, err
}

type versionCursor struct {
	After snapshot.Version `json:"after"`
}

// versions answers GET /v1/versions?limit=&page_token=, newest first.
func (s *Server) versions(w http.ResponseWriter, r *http.Request) error {
	limit, err := s.pageLimit(r)
	if err != nil {
		return err
	}
	var tok versionCursor
	if t := r.URL.Query().Get("page_token"); t != "" {
		if err := decodePageCursor(t, &tok); err != nil {
			return err
		}
	}
	ptr, err := s.pointerOrNone(r)
	if err != nil {
		return err
	}
	if tok.After != "" {
		if _, err := snapshot.ParseVersion(string(tok.After)); err != nil {
			return badRequest("page_token: malformed; pass back the next_page_token of a previous page")
		}
	}
	// One more than the page, to know whether another follows.
	ms, err := s.reader.Versions(r.Context(), tok.After, limit+1)
	if err != nil {
		return err
	}
	out := struct {
		Versions      []versionInfo `json:"versions"`
		NextPageToken string        `json:"next_page_token,omitempty"`
	}{Versions: []versionInfo{}}
	for _, m := range ms[:min(limit, len(ms))] {
		out.Versions = append(out.Versions, s.describeFor(r, m, ptr.Version))
	}
	if len(ms) > limit {
		out.NextPageToken = encodeCursor(versionCursor{After: ms[limit-1].Version})
	}
	w.Header().Set("Cache-Control", "no-cache")
	writeJSON(w, http.StatusOK, out)
	return nil
}

// currentVersion answers GET /v1/versions/current: the pointer and its version.
func (s *Server) currentVersion(w http.ResponseWriter, r *http.Request) error {
	view, err := s.current(r)
	if err != nil {
		return err
	}
	p, err := s.reader.Pointer(r.Context())
	if err != nil {
		return err
	}
	info := s.describeFor(r, view.Manifest, p.Version)
	out := struct {
		versionInfo
		Previous   snapshot.Version `json:"previous,omitempty"`
		Fence      uint64           `json:"fence"`
		Pinned     bool             `json:"pinned"`
		PinReason  string           `json:"pin_reason,omitempty"`
		FlippedAt  time.Time        `json:"flipped_at"`
		AgeSeconds float64          `json:"age_seconds"`
		TTLSeconds float64          `json:"ttl_seconds,omitempty"`
		Covers     string           `json:"covers,omitempty"`
	}{versionInfo: info, Previous: p.Previous, Fence: p.Fence, Pinned: p.Pinned, FlippedAt: p.FlippedAt,
		AgeSeconds: time.Since(view.Manifest.DataTime()).Seconds(), TTLSeconds: view.Manifest.TTL.Seconds()}
	if p.Pinned {
		out.PinReason = p.Reason
	}
	if p.Version == view.Version {
		out.Covers = coversToken(p)
	} else {
		out.Covers = info.SnapshotToken
	}
	s.stamp(w, view)
	w.Header().Set("Cache-Control", "no-cache")
	writeJSON(w, http.StatusOK, out)
	return nil
}

// version answers GET /v1/versions/{version}: its manifest, whatever its state.
func (s *Server) version(w http.ResponseWriter, r *http.Request) error {
	v, err := versionParam(r)
	if err != nil {
		return err
	}
	m, err := s.reader.Manifest(r.Context(), v)
	if err != nil {
		return err
	}
	ptr, err := s.pointerOrNone(r)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-cache")
	writeJSON(w, http.StatusOK, s.describeFor(r, m, ptr.Version))
	return nil
}

// versionParam reads the {version} path parameter as a version id.
func versionParam(r *http.Request) (snapshot.Version, error) {
	raw, err := pathParam(r, "version", 128)
	if err != nil {
		return "", err
	}
	return snapshot.ParseVersion(raw)
}
