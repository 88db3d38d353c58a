package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/cespare/xxhash/v2"

	"github.com/snapflip/snapflip/resolver"
	"github.com/snapflip/snapflip/snapshot"
)

// The changes of a version: a client that holds a collection as of a version's parent
// follows it to the version by the ids the version changed, reloading the collection
// only when the version wrote it whole.

// Change listing limits: ?limit= defaults to defaultChangesLimit, at most maxChangesLimit.
const (
	defaultChangesLimit = 1000
	maxChangesLimit     = 10_000
)

// changesResponse is the body of GET /v1/versions/{version}/changes/{collection}.
type changesResponse struct {
	Version    snapshot.Version     `json:"version"`
	Parent     snapshot.Version     `json:"parent,omitempty"`
	Collection string               `json:"collection"`
	Kind       snapshot.ChangesKind `json:"kind"`
	Changes    []changeInfo         `json:"changes"`
	Next       string               `json:"next,omitempty"`
}

type changeInfo struct {
	ID      string `json:"id"`
	Deleted bool   `json:"deleted,omitempty"`
}

// changes answers GET /v1/versions/{version}/changes/{collection}?limit=&after=: the
// ids the version's own layer changed against its parent, in id order, pinned to the
// version and so cacheable for good.
func (s *Server) changes(w http.ResponseWriter, r *http.Request) error {
	v, err := versionParam(r)
	if err != nil {
		return err
	}
	collection, err := pathParam(r, "collection", 128)
	if err != nil {
		return err
	}
	scope, err := s.grant(r, collection)
	if err != nil {
		return err
	}
	limit, err := changesLimit(r)
	if err != nil {
		return err
	}
	cur, err := readChangesCursor(r, v, collection)
	if err != nil {
		return err
	}
	view, err := s.changesView(r, v)
	if err == nil {
		err = s.withToken(r, view, collection, cur.Judged)
	}
	if err != nil {
		return err
	}
	s.stampFor(w, view, collection)
	m, err := s.scopeIn(r, view, true, collection, scope) // the path names the version
	if err != nil {
		return err
	}
	var page snapshot.Changes
	var next string
	if m != nil {
		after, err := s.openCursor(cur, view.Version, collection, m)
		if err != nil {
			return err
		}
		var pos string
		page, pos, err = s.scopedChanges(r.Context(), changesRead{view, collection, after, limit}, m)
		if err != nil {
			return err
		}
		if page.More {
			next = encodeCursor(changesCursor{pageCursor: pageCursor{Version: view.Version, Collection: collection, Judged: judgedKey(r)},
				Sealed: s.cursors.seal([]byte(pos), cursorBound(view.Version, collection, m))})
		}
	} else {
		if len(cur.Sealed) > 0 {
			return badRequest("after: a scoped caller's cursor; pass back the next of a page of your own")
		}
		if page, err = s.reader.ChangedIDs(r.Context(), view, collection, cur.After, limit); err != nil {
			return err
		}
		if page.More && len(page.IDs) > 0 {
			next = encodeCursor(pageCursor{Version: view.Version, Collection: collection, After: page.IDs[len(page.IDs)-1].ID, Judged: judgedKey(r)})
		}
	}
	out := changesResponse{Version: view.Version, Parent: page.Parent, Collection: collection, Kind: page.Kind,
		Changes: make([]changeInfo, len(page.IDs))}
	for i, c := range page.IDs {
		out.Changes[i] = changeInfo{ID: c.ID, Deleted: c.Deleted}
	}
	out.Next = next
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false) // ids as they are, as the listing writes them
	if err := enc.Encode(out); err != nil {
		return err
	}
	w.Header()["Cache-Control"] = s.immutable()
	writeTagged(w, r, fmt.Sprintf(`"%016x"`, xxhash.Sum64(body.Bytes())), body.Bytes())
	return nil
}

// changesView returns the version's view: 404 for a version never written, 410 for
// one that is no longer (or never was) readable.
func (s *Server) changesView(r *http.Request, v snapshot.Version) (snapshot.View, error) {
	view, err := s.reader.View(r.Context(), v)
	if !errors.Is(err, snapshot.ErrGone) {
		return view, err
	}
	if _, merr := s.reader.Manifest(r.Context(), v); errors.Is(merr, snapshot.ErrNotFound) {
		return snapshot.View{}, fmt.Errorf("version %s: %w", v, snapshot.ErrNotFound)
	}
	return snapshot.View{}, err
}

// changesLimit parses ?limit= (default defaultChangesLimit, at most maxChangesLimit).
func changesLimit(r *http.Request) (int, error) {
	q := r.URL.Query().Get("limit")
	if q == "" {
		return defaultChangesLimit, nil
	}
	n, err := strconv.Atoi(q)
	if err != nil || n < 1 || n > maxChangesLimit {
		return 0, badRequest("limit %q: want 1..%d", truncate(q, 20), maxChangesLimit)
	}
	return n, nil
}

// changesCursor is a changes page's next: a page token, or for a scoped caller a
// sealed position instead of its After (one the caller may not read: sealer).
type changesCursor struct {
	pageCursor
	Sealed []byte `json:"s,omitempty"`
}

// readChangesCursor returns the cursor ?after= names: zero for the first page; else a
// previous page's next, of the same version and collection.
func readChangesCursor(r *http.Request, v snapshot.Version, collection string) (changesCursor, error) {
	c := r.URL.Query().Get("after")
	if c == "" {
		return changesCursor{}, nil
	}
	var t changesCursor
	if err := decodeCursor("after", "next", c, &t); err != nil {
		return changesCursor{}, err
	}
	if t.Version == "" {
		return changesCursor{}, badRequest("after: names no version; pass back the next of a previous page")
	}
	if t.Version != v || t.Collection != collection {
		return changesCursor{}, badRequest("after: it belongs to version %q collection %q, not %s %q",
			truncate(string(t.Version), 80), truncate(t.Collection, 128), v, collection)
	}
	if len(t.Sealed) > 0 {
		return t, nil
	}
	return t, checkID("after", t.After, MaxIDBytes)
}

// openCursor returns the id a scoped caller's page starts after: the sealed position
// of its own previous page, or an id it named in clear (which tells it nothing).
func (s *Server) openCursor(t changesCursor, v snapshot.Version, collection string, m *scopeMatch) (string, error) {
	if len(t.Sealed) == 0 {
		return t.After, nil
	}
	after, err := s.cursors.open(t.Sealed, cursorBound(v, collection, m))
	if err != nil {
		return "", badRequest("after: %v; pass back the next of a previous page", err)
	}
	return string(after), nil
}

// cursorBound is what a sealed cursor is for: it opens for this version, collection
// and scope alone.
func cursorBound(v snapshot.Version, collection string, m *scopeMatch) []byte {
	return []byte(string(v) + "\x00" + collection + "\x00" + m.field + "\x00" + m.cond.Values[0])
}

// scopedChangesReads bounds the changed ids one scoped changes page examines (each
// costs two or three storage reads), so that a page costs the same however much
// outside the scope changed; past it the page ends, with a cursor, however few ids
// it holds.
const scopedChangesReads = 1000

// changesRead is one page of a version's changes to ask for: those of collection in
// view after the id after, up to limit of them.
type changesRead struct {
	view       snapshot.View
	collection string
	after      string
	limit      int
}

// scopedChanges is ChangedIDs for a caller reading the collection through a scope:
// the changed ids whose document is in the scope in the version (changed) or only in
// its parent (deleted, for the caller: it left the scope), up to limit of them, after
// examining at most scopedChangesReads changed ids. When more may follow (More), pos
// is the last id it examined, where the next page starts, which may be outside the
// scope: the caller gets it sealed. A version that changed nothing in the
// collection is a delta with no changes to a scoped caller, which cannot tell it from
// one that changed only others' documents.
func (s *Server) scopedChanges(ctx context.Context, q changesRead, m *scopeMatch) (out snapshot.Changes, pos string, err error) {
	view, collection, after := q.view, q.collection, q.after
	var parent snapshot.View
	budget := scopedChangesReads
	for {
		page, err := s.reader.ChangedIDs(ctx, view, collection, after, min(max(q.limit, 100), budget))
		if err != nil {
			return snapshot.Changes{}, "", err
		}
		out.Kind, out.Parent = page.Kind, page.Parent
		if out.Kind == snapshot.ChangesUnchanged {
			out.Kind = snapshot.ChangesDelta
		}
		if len(page.IDs) == 0 {
			return out, "", nil
		}
		if parent.Version == "" && page.Parent != "" {
			if parent, err = s.reader.View(ctx, page.Parent); err != nil {
				return snapshot.Changes{}, "", fmt.Errorf("the parent %s, against which a scoped caller's changes are told: %w", page.Parent, err)
			}
		}
		ids := make([]string, len(page.IDs))
		for i, c := range page.IDs {
			ids[i] = c.ID
		}
		now, _, err := s.reader.GetMany(ctx, view, collection, ids)
		if err != nil {
			return snapshot.Changes{}, "", err
		}
		var before map[string]resolver.Doc
		if parent.Version != "" {
			if before, _, err = s.reader.GetMany(ctx, parent, collection, ids); err != nil {
				return snapshot.Changes{}, "", err
			}
		}
		for i, c := range page.IDs {
			d, ok := now[c.ID]
			in := ok && m.holds(d.Body)
			was := false
			if p, ok := before[c.ID]; ok {
				was = m.holds(p.Body)
			}
			if in || was {
				out.IDs = append(out.IDs, snapshot.Change{ID: c.ID, Deleted: !in})
			}
			budget--
			if len(out.IDs) == q.limit || budget == 0 {
				out.More = i < len(page.IDs)-1 || page.More
				return out, c.ID, nil
			}
		}
		if !page.More {
			return out, "", nil
		}
		after = page.IDs[len(page.IDs)-1].ID
	}
}
