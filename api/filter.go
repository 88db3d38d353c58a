package api

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/snapflip/snapflip/auth"
	"github.com/snapflip/snapflip/index"
	"github.com/snapflip/snapflip/resolver"
	"github.com/snapflip/snapflip/snapshot"
)

// listParams are the list route's own query parameters; every other one is a filter
// condition on the field it names.
var listParams = map[string]bool{"limit": true, "page_token": true, "version": true, "select": true, "after": true}

// maxConds bounds the conditions of one filter.
const maxConds = 32

// filterConds returns the request's filter conditions, in field order; none for a
// plain list.
func filterConds(r *http.Request) ([]index.Cond, error) {
	if r.URL.RawQuery == "" {
		return nil, nil
	}
	q := r.URL.Query()
	var fields []string
	for f := range q {
		if !listParams[f] {
			fields = append(fields, f)
		}
	}
	slices.Sort(fields)
	var conds []index.Cond
	for _, f := range fields {
		for _, v := range q[f] {
			if len(conds) == maxConds {
				return nil, badRequest("filter: more than %d conditions", maxConds)
			}
			c, err := index.ParseCond(f, v)
			if err != nil {
				return nil, badRequest("%v", err)
			}
			conds = append(conds, c)
		}
	}
	return conds, nil
}

// filterCursor is a filter page's next_page_token: the version, the collection, the
// filter (so that a token is never read for another), and the entry to read after.
type filterCursor struct {
	Version    snapshot.Version `json:"v"`
	Collection string           `json:"c"`
	Filter     string           `json:"f"`
	After      []byte           `json:"e"`
	Judged     string           `json:"k,omitempty"` // as pageCursor's
}

// filterText is a filter's conditions as one string, for its page tokens.
func filterText(conds []index.Cond) string {
	parts := make([]string, len(conds))
	for i, c := range conds {
		parts[i] = c.String()
	}
	return strings.Join(parts, "&")
}

// filterView returns the view a filter page reads and the entry it starts after:
// the page token's, or the request's version from the start.
func (s *Server) filterView(r *http.Request, collection, filter string) (snapshot.View, string, bool, error) {
	tok := r.URL.Query().Get("page_token")
	if tok == "" {
		view, pinned, err := s.viewFor(r, collection)
		return view, "", pinned, err
	}
	var t filterCursor
	if err := decodePageCursor(tok, &t); err != nil {
		return snapshot.View{}, "", true, err
	}
	v, err := snapshot.ParseVersion(string(t.Version))
	switch {
	case err != nil:
		return snapshot.View{}, "", true, badRequest("page_token: %v", err)
	case t.Collection != collection || t.Filter != filter || len(t.After) == 0:
		return snapshot.View{}, "", true, badRequest("page_token: it belongs to another collection or filter; pass back the next_page_token of a page of this one")
	}
	view, err := s.reader.View(r.Context(), v)
	if err == nil {
		err = s.withToken(r, view, collection, t.Judged)
	}
	return view, string(t.After), true, err
}

// planFilter returns the scan of the collection's indexes in the view that serves
// conds, or a bad request naming them.
func planFilter(view snapshot.View, collection string, conds []index.Cond) (index.Scan, error) {
	c, ok := view.Manifest.Collections[collection]
	if !ok {
		return index.Scan{}, fmt.Errorf("collection %q: %w", collection, snapshot.ErrNotFound)
	}
	if len(c.Indexes) == 0 {
		return index.Scan{}, badRequest("filter: collection %s has no indexes in version %s: declare them in its config (indexes: [field, …]) to filter by field",
			collection, view.Version)
	}
	defs := make([]index.Def, 0, len(c.Indexes))
	for _, d := range c.Indexes {
		def, err := index.Typed(d)
		if err != nil {
			return index.Scan{}, err
		}
		defs = append(defs, def)
	}
	scan, err := index.Plan(defs, conds)
	if errors.Is(err, snapshot.ErrInvalid) {
		return index.Scan{}, badRequest("filter on collection %s: %v", collection, err)
	}
	return scan, err
}

// filterDocuments answers GET /v1/data/{collection}?{field}={op}.{value}&…: a page of
// the documents that match every condition, in the order of the index that serves
// them, all from one version.
func (s *Server) filterDocuments(w http.ResponseWriter, r *http.Request, fr filterRequest) error {
	conds := fr.conds
	if fr.scope != nil {
		// The scope is one more condition, and part of the filter its page tokens
		// name: a token is never read for another scope.
		conds = append(slices.Clip(conds), index.Cond{Field: fr.scope.Field, Op: index.OpEq, Values: []string{fr.scope.Value}})
	}
	filter := filterText(conds)
	view, after, pinned, err := s.filterView(r, fr.collection, filter)
	if err != nil {
		return err
	}
	s.stampFor(w, view, fr.collection)
	m, err := s.scopeIn(r, view, pinned, fr.collection, fr.scope)
	if err != nil {
		return err
	}
	conds = fr.conds
	if m != nil {
		// The caller's own conditions on its scope field and the scope both apply,
		// as in PostgREST under row-level security: a condition the scope's value
		// fails is an empty page, never an error and never another scope's rows.
		none := m.want == nil // the claim is no value of the field: nothing is in scope
		if !none {
			if conds, none, err = m.narrow(fr.collection, conds); err != nil {
				return err
			}
		}
		if none {
			return s.writePage(w, page{view: view, pinned: pinned, collection: fr.collection, sel: fr.sel})
		}
		conds = append(conds, m.cond)
	}
	scan, err := planFilter(view, fr.collection, conds)
	if err != nil {
		return err
	}
	got, err := s.reader.Filter(r.Context(), view, resolver.FilterQuery{Collection: fr.collection, Scan: scan, After: after, Limit: fr.limit})
	if err != nil {
		return err
	}
	if m != nil {
		got.Docs = s.inScope(r, scopedPage{view.Version, fr.collection, filter, after, fr.limit}, m, got.Docs)
	}
	var next string
	if got.Next != "" {
		next = encodeCursor(filterCursor{Version: view.Version, Collection: fr.collection, Filter: filter, After: []byte(got.Next), Judged: judgedKey(r)})
	}
	return s.writePage(w, page{view: view, pinned: pinned, collection: fr.collection, docs: got.Docs, sel: fr.sel, next: next})
}

// narrow returns conds without those on the scope's field, each of which the scope's
// value (m.want, not nil) satisfies; none reports that one does not (no document of
// the scope can match). A condition value that is not of the field's type is a bad
// request.
func (m *scopeMatch) narrow(collection string, conds []index.Cond) (rest []index.Cond, none bool, err error) {
	for _, c := range conds {
		if c.Field != m.field {
			rest = append(rest, c)
			continue
		}
		ok, err := c.Holds(m.typ, m.want)
		if err != nil {
			return nil, false, badRequest("filter on collection %s: %v", collection, err)
		}
		if !ok {
			return nil, true, nil
		}
	}
	return rest, false, nil
}

// scopedPage names one page of a scoped filter: a version's documents never change,
// so a page found wholly in its scope once is so for good.
type scopedPage struct {
	version    snapshot.Version
	collection string
	filter     string // the conditions, the scope's among them
	after      string
	limit      int
}

// inScope returns the documents of a scoped filter's page that are in the scope: the
// index found them, and each is tested again itself, so that an index entry that
// disagrees with its document never becomes another scope's read. A dropped one is
// logged: it is a defect of the index. A page found wholly in scope is remembered,
// and not tested again.
func (s *Server) inScope(r *http.Request, p scopedPage, m *scopeMatch, docs []snapshot.Document) []snapshot.Document {
	if s.checked.Contains(p) {
		return docs
	}
	if !slices.ContainsFunc(docs, func(d snapshot.Document) bool { return !m.holds(d.Body) }) {
		s.checked.Add(p, struct{}{})
		return docs // the page may be a cache's: it is never changed in place
	}
	var kept []snapshot.Document
	for _, d := range docs {
		if m.holds(d.Body) {
			kept = append(kept, d)
			continue
		}
		s.log.ErrorContext(r.Context(), "an index entry of a row scope names a document outside it; not served",
			"version", p.version, "collection", p.collection, "field", m.field)
	}
	return kept
}

// filterRequest is a filter as the list route read it.
type filterRequest struct {
	collection string
	conds      []index.Cond
	scope      *auth.Scope // the caller's row scope; nil for every document
	limit      int
	sel        selection
}
