package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"

	"github.com/snapflip/snapflip/resolver"
	"github.com/snapflip/snapflip/snapshot"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// verbatim builds a response that holds documents as stored, byte for byte as GET
// serves them: encoding/json would compact them and escape <, > and & in them, so a
// document read by batchGet or a list would differ from the same one read by GET.
type verbatim struct {
	b   []byte
	buf bytes.Buffer  // str's scratch, reused for every id of a page
	enc *json.Encoder // writes to buf, with <, > and & as they are
}

func (v *verbatim) raw(s string) *verbatim { v.b = append(v.b, s...); return v }

// doc appends a document's bytes as they are.
func (v *verbatim) doc(b []byte) *verbatim { v.b = append(v.b, b...); return v }

// str appends s as a JSON string, with <, > and & as they are.
func (v *verbatim) str(s string) *verbatim {
	if v.enc == nil {
		v.enc = json.NewEncoder(&v.buf)
		v.enc.SetEscapeHTML(false)
	}
	v.buf.Reset()
	_ = v.enc.Encode(s)
	v.b = append(v.b, bytes.TrimSuffix(v.buf.Bytes(), []byte("\n"))...)
	return v
}

func (v *verbatim) write(w http.ResponseWriter) {
	// With its length the response goes out in one write, not in chunks.
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(v.b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(v.b)
}

// getDocument answers GET /v1/data/{collection}/{id}?select=.
func (s *Server) getDocument(w http.ResponseWriter, r *http.Request) error {
	collection, err := pathParam(r, "collection", 128)
	if err != nil {
		return err
	}
	id, err := pathParam(r, "id", MaxIDBytes)
	if err != nil {
		return err
	}
	scope, err := s.grant(r, collection)
	if err != nil {
		return err
	}
	sel, err := parseSelect(r)
	if err != nil {
		return err
	}
	view, pinned, err := s.viewFor(r, collection)
	if err != nil {
		return err
	}
	s.stampFor(w, view, collection)
	// The scope is settled before the read, so that no answer depends on whether an
	// id outside it exists.
	m, err := s.scopeIn(r, view, pinned, collection, scope)
	if err != nil {
		return err
	}
	doc, err := s.reader.Get(r.Context(), view, collection, id)
	if err != nil {
		return err
	}
	if m != nil {
		// Outside the scope is not there: the same 404 as an id never written.
		if !m.holds(doc.Body) {
			return fmt.Errorf("collection %s id %q: %w", collection, snapshot.Truncate(id, 200), snapshot.ErrNotFound)
		}
	}
	body, err := sel.apply(doc.Body)
	if err != nil {
		return fmt.Errorf("document %q of %s in %s: %w", truncate(id, 80), collection, view.Version, err)
	}
	s.cacheHeaders(w, view, pinned)
	writeTagged(w, r, sel.etag(doc.ETag, body), body)
	return nil
}

// writeTagged writes a JSON body and its ETag, or only 304 Not Modified when the
// request's If-None-Match names the ETag.
func writeTagged(w http.ResponseWriter, r *http.Request, etag string, body []byte) {
	h := w.Header()
	h["Etag"] = []string{etag}
	if match := r.Header["If-None-Match"]; len(match) > 0 && match[0] == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h["Content-Type"] = contentJSON
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	_, _ = w.Write(body)
}

// batchGetRequest is the body of POST /v1/data/{collection}:batchGet.
type batchGetRequest struct {
	IDs []string `json:"ids"`
}

// batchGet answers POST /v1/data/{collection}:batchGet?select=.
func (s *Server) batchGet(w http.ResponseWriter, r *http.Request) error {
	collection, err := pathParam(r, "collection", 128)
	if err != nil {
		return err
	}
	scope, err := s.grant(r, collection)
	if err != nil {
		return err
	}
	var req batchGetRequest
	if err := decodeStrict(w, r, s.cfg.MaxBodyBytes, &req, `{"ids": ["..."]}`); err != nil {
		return err
	}
	switch {
	case len(req.IDs) == 0:
		return badRequest("ids: at least one id is required")
	case len(req.IDs) > s.cfg.BatchLimit:
		return badRequest("ids: %d ids, over the limit of %d", len(req.IDs), s.cfg.BatchLimit)
	}
	for i, id := range req.IDs {
		if err := checkID("ids["+strconv.Itoa(i)+"]", id, MaxIDBytes); err != nil {
			return err
		}
	}
	sel, err := parseSelect(r)
	if err != nil {
		return err
	}
	view, pinned, err := s.viewFor(r, collection)
	if err != nil {
		return err
	}
	s.stampFor(w, view, collection)
	m, err := s.scopeIn(r, view, pinned, collection, scope)
	if err != nil {
		return err
	}
	docs, missing, err := s.reader.GetMany(r.Context(), view, collection, req.IDs)
	if err != nil {
		return err
	}
	if m != nil {
		missing = m.keep(req.IDs, docs, missing)
	}
	ids := slices.Sorted(maps.Keys(docs))
	var b verbatim
	b.raw(`{"version":`).str(string(view.Version)).raw(`,"documents":{`)
	for i, id := range ids {
		if i > 0 {
			b.raw(",")
		}
		body, err := sel.apply(docs[id].Body)
		if err != nil {
			return fmt.Errorf("document %q of %s in %s: %w", truncate(id, 80), collection, view.Version, err)
		}
		b.str(id).raw(":").doc(body)
	}
	b.raw(`},"missing":[`)
	for i, id := range missing {
		if i > 0 {
			b.raw(",")
		}
		b.str(id)
	}
	b.raw("]}\n")
	s.cacheHeaders(w, view, pinned)
	w.Header().Set("Cache-Control", "no-store") // a POST; its answer depends on the body
	b.write(w)
	return nil
}

// keep drops from docs the documents outside the scope and returns the ids missing,
// those dropped among them, in the order the request named them.
func (m *scopeMatch) keep(ids []string, docs map[string]resolver.Doc, missing []string) []string {
	gone := make(map[string]bool, len(missing))
	for _, id := range missing {
		gone[id] = true
	}
	for id, d := range docs {
		if !m.holds(d.Body) {
			delete(docs, id)
			gone[id] = true
		}
	}
	out := missing[:0]
	for _, id := range ids {
		if gone[id] {
			out = append(out, id)
			delete(gone, id)
		}
	}
	return out
}

// pageCursor is where a listing stopped; it carries the version so that every page of
// a listing comes from the same one, whatever the pointer does meanwhile.
type pageCursor struct {
	Version    snapshot.Version `json:"v"`
	Collection string           `json:"c"`
	After      string           `json:"a"`
	// Judged names the Snapshot-After token the first page's version was judged to
	// cover (judgedKey), so that the next pages, sending it again, are not judged
	// again: the version may no longer be the one the coverage was recorded for.
	Judged string `json:"k,omitempty"`
}

func encodeCursor(t any) string {
	b, _ := json.Marshal(t)
	return base64.RawURLEncoding.EncodeToString(b)
}

// maxCursorBytes bounds a page token. The longest the server makes — a version, a
// 128-byte collection and a MaxIDBytes id, every byte escaped to six by JSON — is
// about 9.3 KB of base64.
const maxCursorBytes = 16 << 10

// decodePageCursor parses a page token into t; any malformed token is a bad request.
func decodePageCursor(s string, t any) error {
	return decodeCursor("page_token", "next_page_token", s, t)
}

// decodeCursor parses the token s of query parameter param into t; any malformed token
// is a bad request, which says to pass back the field from of a previous page.
func decodeCursor(param, from, s string, t any) error {
	if len(s) > maxCursorBytes {
		return badRequest("%s: too long", param)
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || json.Unmarshal(b, t) != nil {
		return badRequest("%s: malformed; pass back the %s of a previous page", param, from)
	}
	return nil
}

// pageLimit parses ?limit= (default 100, at most PageLimit).
func (s *Server) pageLimit(r *http.Request) (int, error) {
	q := r.URL.Query().Get("limit")
	if q == "" {
		return min(100, s.cfg.PageLimit), nil
	}
	n, err := strconv.Atoi(q)
	if err != nil || n < 1 || n > s.cfg.PageLimit {
		return 0, badRequest("limit %q: want 1..%d", truncate(q, 20), s.cfg.PageLimit)
	}
	return n, nil
}

// listDocuments answers GET /v1/data/{collection}?limit=&page_token=&select=.
func (s *Server) listDocuments(w http.ResponseWriter, r *http.Request) error {
	collection, err := pathParam(r, "collection", 128)
	if err != nil {
		return err
	}
	scope, err := s.grant(r, collection)
	if err != nil {
		return err
	}
	limit, err := s.pageLimit(r)
	if err != nil {
		return err
	}
	// A page token does not carry the selection: every page names it again (so a
	// token is the same whatever a page selects).
	sel, err := parseSelect(r)
	if err != nil {
		return err
	}
	conds, err := filterConds(r)
	if err != nil {
		return err
	}
	if len(conds) > 0 || scope != nil {
		// A scoped caller's list is a filter on its scope alone.
		return s.filterDocuments(w, r, filterRequest{collection: collection, conds: conds, scope: scope, limit: limit, sel: sel})
	}
	var view snapshot.View
	var after string
	pinned := true
	if tok := r.URL.Query().Get("page_token"); tok != "" {
		var t pageCursor
		if err := decodePageCursor(tok, &t); err != nil {
			return err
		}
		v, err := snapshot.ParseVersion(string(t.Version))
		if err == nil && t.Collection != collection {
			err = badRequest("page_token: it belongs to collection %q, not %q", truncate(t.Collection, 128), collection)
		}
		if err == nil {
			err = checkID("page_token", t.After, MaxIDBytes)
		}
		if err == nil {
			view, err = s.reader.View(r.Context(), v)
		}
		if err == nil {
			err = s.withToken(r, view, collection, t.Judged)
		}
		if err != nil {
			return err
		}
		after = t.After
	} else if view, pinned, err = s.viewFor(r, collection); err != nil {
		return err
	}
	s.stampFor(w, view, collection)
	docs, more, err := s.reader.Page(r.Context(), view, collection, after, limit)
	if err != nil {
		return err
	}
	var next string
	if more && len(docs) > 0 {
		next = encodeCursor(pageCursor{Version: view.Version, Collection: collection, After: docs[len(docs)-1].ID, Judged: judgedKey(r)})
	}
	return s.writePage(w, page{view: view, pinned: pinned, collection: collection, docs: docs, sel: sel, next: next})
}

// page is one page of documents as the list and filter routes answer it.
type page struct {
	view       snapshot.View
	pinned     bool // read from a version the request named
	collection string
	docs       []snapshot.Document
	sel        selection
	next       string // the next page's token; "" for the last page
}

// writePage writes a page: its version, its documents (their selected fields), and
// the token of the next page.
func (s *Server) writePage(w http.ResponseWriter, p page) error {
	// Room for every document and its framing up front: a page of 100 documents of
	// 350 B otherwise grows the buffer a dozen times.
	size := 64 + len(p.view.Version) + len(p.next)
	for _, d := range p.docs {
		size += 32 + len(d.ID) + len(d.Body)
	}
	b := verbatim{b: make([]byte, 0, size)}
	b.raw(`{"version":`).str(string(p.view.Version)).raw(`,"documents":[`)
	for i, d := range p.docs {
		if i > 0 {
			b.raw(",")
		}
		body, err := p.sel.apply(d.Body)
		if err != nil {
			return fmt.Errorf("document %q of %s in %s: %w", truncate(d.ID, 80), p.collection, p.view.Version, err)
		}
		b.raw(`{"id":`).str(d.ID).raw(`,"document":`).doc(body).raw("}")
	}
	b.raw("]")
	if p.next != "" {
		b.raw(`,"next_page_token":`).str(p.next)
	}
	b.raw("}\n")
	s.cacheHeaders(w, p.view, p.pinned)
	b.write(w)
	return nil
}
