package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/snapflip/snapflip/snapshot"
)

type collectionInfo struct {
	Name  string `json:"name"`
	Count int64  `json:"count"`
	Bytes int64  `json:"bytes"`
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
	for _, name := range view.Manifest.CollectionNames() {
		c := view.Manifest.Collections[name]
		out.Collections = append(out.Collections, collectionInfo{Name: name, Count: c.Rows, Bytes: c.Bytes})
	}
	cacheHeaders(w, view.Version, pinned)
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
	Token       uint64           `json:"token,omitempty"`
	Slot        int64            `json:"slot,omitempty"`
	Writer      string           `json:"writer"`
	StartedAt   time.Time        `json:"started_at"`
	SealedAt    *time.Time       `json:"sealed_at,omitempty"`
	PublishedAt *time.Time       `json:"published_at,omitempty"`
	ExpiresAt   *time.Time       `json:"expires_at,omitempty"`
	Reason      string           `json:"reason,omitempty"`
}

type sourceInfo struct {
	LSN      string `json:"lsn"`
	Snapshot string `json:"snapshot,omitempty"`
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
		Source: sourceInfo{LSN: m.Source.String(), Snapshot: m.Source.Snapshot},
		Token:  m.Token, Slot: m.Slot, Writer: m.Writer, StartedAt: m.StartedAt,
		SealedAt: timePtr(m.SealedAt), PublishedAt: timePtr(m.PublishedAt), ExpiresAt: timePtr(m.ExpiresAt(0)),
		Reason: m.Reason,
	}
}

// pointerOrNone returns the pointer, or a zero one when nothing is published.
func (s *Server) pointerOrNone(r *http.Request) (snapshot.Pointer, error) {
	p, err := s.reader.Pointer(r.Context())
	if errors.Is(err, snapshot.ErrNoVersion) {
		return snapshot.Pointer{}, nil
	}
	return p, err
}

type versionToken struct {
	After snapshot.Version `json:"after"`
}

// versions answers GET /v1/versions?limit=&page_token=, newest first.
func (s *Server) versions(w http.ResponseWriter, r *http.Request) error {
	limit, err := s.pageLimit(r)
	if err != nil {
		return err
	}
	var tok versionToken
	if t := r.URL.Query().Get("page_token"); t != "" {
		if err := decodeToken(t, &tok); err != nil {
			return err
		}
	}
	ptr, err := s.pointerOrNone(r)
	if err != nil {
		return err
	}
	all, err := s.reader.Versions(r.Context())
	if err != nil {
		return err
	}
	start := 0
	if tok.After != "" {
		start = len(all)
		for i, m := range all {
			if m.Version == tok.After {
				start = i + 1
				break
			}
		}
	}
	end := min(start+limit, len(all))
	out := struct {
		Versions      []versionInfo `json:"versions"`
		NextPageToken string        `json:"next_page_token,omitempty"`
	}{Versions: []versionInfo{}}
	for _, m := range all[start:end] {
		out.Versions = append(out.Versions, describeVersion(m, ptr.Version))
	}
	if end < len(all) {
		out.NextPageToken = encodeToken(versionToken{After: all[end-1].Version})
	}
	w.Header().Set("Cache-Control", "no-cache")
	writeJSON(w, http.StatusOK, out)
	return nil
}

// currentVersion answers GET /v1/versions/current: the pointer and its version.
func (s *Server) currentVersion(w http.ResponseWriter, r *http.Request) error {
	p, err := s.reader.Pointer(r.Context())
	if err != nil {
		return err
	}
	view, err := s.reader.Current(r.Context())
	if err != nil {
		return err
	}
	info := describeVersion(view.Manifest, p.Version)
	out := struct {
		versionInfo
		Previous   snapshot.Version `json:"previous,omitempty"`
		Fence      uint64           `json:"fence"`
		Pinned     bool             `json:"pinned"`
		PinReason  string           `json:"pin_reason,omitempty"`
		FlippedAt  time.Time        `json:"flipped_at"`
		AgeSeconds float64          `json:"age_seconds"`
		TTLSeconds float64          `json:"ttl_seconds,omitempty"`
	}{versionInfo: info, Previous: p.Previous, Fence: p.Fence, Pinned: p.Pinned, FlippedAt: p.FlippedAt,
		AgeSeconds: time.Since(view.Manifest.DataTime()).Seconds(), TTLSeconds: view.Manifest.TTL.Seconds()}
	if p.Pinned {
		out.PinReason = p.Reason
	}
	w.Header().Set(HeaderVersion, string(view.Version))
	w.Header().Set("Cache-Control", "no-cache")
	writeJSON(w, http.StatusOK, out)
	return nil
}

// version answers GET /v1/versions/{version}: its manifest, whatever its state.
func (s *Server) version(w http.ResponseWriter, r *http.Request) error {
	raw, err := pathParam(r, "version", 128)
	if err != nil {
		return err
	}
	v, err := snapshot.ParseVersion(raw)
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
	writeJSON(w, http.StatusOK, describeVersion(m, ptr.Version))
	return nil
}
