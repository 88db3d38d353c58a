package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
)

// Document is one document as the API served it.
type Document struct {
	// ID is the document's id (its key column's value, as text).
	ID string
	// JSON is the document: the JSON Postgres makes of the row with to_json, its
	// columns in order, byte for byte as stored (the bytes the ETag hashes), whether
	// read by Get, BatchGet or List. Read with Select, it holds the selected fields,
	// each name and value as stored, joined by ",".
	JSON json.RawMessage
	// Version is the version it was read from.
	Version string
	// ETag is the strong entity tag of the bytes (with Select, of the selection's);
	// only Get sets it.
	ETag string
}

// Decode unmarshals the document into v.
func (d Document) Decode(v any) error { return json.Unmarshal(d.JSON, v) }

// Get reads one document of the current version. An unknown collection or id is an
// error matching ErrNotFound. Select keeps only some fields.
func (c *Client) Get(ctx context.Context, collection, id string, opts ...ReadOption) (Document, error) {
	return c.get(ctx, "", collection, id, opts)
}

// BatchGet reads many documents of one collection, all from one version: the documents
// found by id, the ids missing (in the order the API listed them), and the version.
// A list longer than Config.BatchLimit ids, or than Config.MaxBatchBytes of JSON, is
// sent as several requests; the first one's version is named in the others, so all
// parts still come from one version (a part whose version expired meanwhile fails
// with ErrGone); After's token is sent with the first part only, whose version
// covered it. Duplicate ids are asked for once. No ids: nothing is sent. Select
// keeps only some fields.
func (c *Client) BatchGet(ctx context.Context, collection string, ids []string, opts ...ReadOption) (docs map[string]Document, missing []string, version string, err error) {
	return c.batchGet(ctx, "", collection, ids, opts)
}

// ListOptions tunes List.
type ListOptions struct {
	// PageSize is how many documents one request asks for, 1..1000; 0 leaves it to the
	// server (100).
	PageSize int

	filters []Filter // Query's conditions
}

// List returns the documents of a collection in id order (by the bytes of the id),
// page by page as the loop asks for them, all from one version: the first page's,
// which the API's page tokens carry to the next pages whatever the pointer does
// meanwhile. Select keeps only some fields of every document, on every page. An error
// ends the sequence, yielded with a zero Document:
//
//	for doc, err := range c.List(ctx, "tenants", client.ListOptions{}, client.Select("id", "plan")) {
//		if err != nil {
//			return err
//		}
//		...
//	}
func (c *Client) List(ctx context.Context, collection string, opts ListOptions, read ...ReadOption) iter.Seq2[Document, error] {
	return c.list(ctx, "", collection, opts, read)
}

// docPath returns the escaped path of a document.
func docPath(collection, id string) string {
	return "/v1/data/" + escapeSegment(collection) + "/" + escapeSegment(id)
}

// versionQuery names a version in a query, or nothing when version is "".
func versionQuery(version string) url.Values {
	q := url.Values{}
	if version != "" {
		q.Set("version", version)
	}
	return q
}

// checkVersion is the check that an answer came from the version asked for: the API
// guarantees it, and a Snapshot promises it, so a mismatch is reported, not served.
func checkVersion(method, path, want, got string) error {
	if want != "" && got != want {
		return fmt.Errorf("snapflip: %s %s: answered from version %q, not the %q asked for", method, truncate(path, 200), got, want)
	}
	if got == "" {
		return fmt.Errorf("snapflip: %s %s: the answer names no version", method, truncate(path, 200))
	}
	return nil
}

func (c *Client) get(ctx context.Context, version, collection, id string, opts []ReadOption) (Document, error) {
	switch {
	case collection == "":
		return Document{}, invalid("get: empty collection")
	case id == "":
		return Document{}, invalid("get: empty id")
	}
	o, err := resolve("get", opts)
	if err != nil {
		return Document{}, err
	}
	r := request{method: http.MethodGet, path: docPath(collection, id), query: o.query(versionQuery(version)), version: version,
		consistency: o.consistency(version)}
	var cached *cacheEntry
	key := ""
	if c.cache != nil {
		key = c.url(r.path, r.query)
		if cached = c.cache.get(key); cached != nil {
			r.etag = cached.etag
		}
	}
	a, err := c.send(ctx, r)
	if err != nil {
		return Document{}, err
	}
	got := a.header.Get(HeaderVersion)
	if err := checkVersion(r.method, r.path, version, got); err != nil {
		return Document{}, err
	}
	d := Document{ID: id, Version: got, ETag: a.header.Get("ETag"), JSON: a.body}
	if a.status == http.StatusNotModified {
		if cached == nil {
			return Document{}, fmt.Errorf("snapflip: GET %s: 304 to a request without If-None-Match", truncate(r.path, 200))
		}
		d.JSON = bytes.Clone(cached.body) // the caller may modify it; the cache's stays as it was
		return d, nil
	}
	if c.cache != nil {
		if d.ETag != "" {
			c.cache.put(&cacheEntry{url: key, etag: d.ETag, body: bytes.Clone(a.body)})
		} else {
			c.cache.drop(key)
		}
	}
	return d, nil
}

// batchBody encodes ids as the JSON body of a batchGet, without HTML escaping (which
// would make "<" six bytes).
func batchBody(ids []string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(struct {
		IDs []string `json:"ids"`
	}{ids})
	return b.Bytes()
}

// splitBatch cuts ids into parts of at most limit ids and maxBytes of body each (an id
// too long for any body goes alone: the API will say what it thinks of it).
func splitBatch(ids []string, limit, maxBytes int) [][]string {
	const overhead = len(`{"ids":[]}` + "\n")
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	var parts [][]string
	start, size := 0, overhead
	for i, id := range ids {
		buf.Reset()
		_ = enc.Encode(id)
		n := buf.Len() - 1 // the id's JSON string, without Encode's newline
		if i > start {
			n++ // its comma
		}
		if i > start && (i-start >= limit || size+n > maxBytes) {
			parts = append(parts, ids[start:i])
			start, size, n = i, overhead, n-1
		}
		size += n
	}
	if start < len(ids) {
		parts = append(parts, ids[start:])
	}
	return parts
}

// batchAnswer is the body of a batchGet's 200.
type batchAnswer struct {
	Version   string                     `json:"version"`
	Documents map[string]json.RawMessage `json:"documents"`
	Missing   []string                   `json:"missing"`
}

func (c *Client) batchGet(ctx context.Context, version, collection string, ids []string, opts []ReadOption) (map[string]Document, []string, string, error) {
	if collection == "" {
		return nil, nil, "", invalid("batchGet: empty collection")
	}
	o, err := resolve("batchGet", opts)
	if err != nil {
		return nil, nil, "", err
	}
	seen := make(map[string]bool, len(ids))
	uniq := make([]string, 0, len(ids))
	for _, id := range ids {
		if id == "" {
			return nil, nil, "", invalid("batchGet: an empty id")
		}
		if !seen[id] {
			seen[id] = true
			uniq = append(uniq, id)
		}
	}
	docs := make(map[string]Document, len(uniq))
	var missing []string
	path := "/v1/data/" + escapeSegment(collection) + ":batchGet"
	for i, part := range splitBatch(uniq, c.cfg.BatchLimit, c.cfg.MaxBatchBytes) {
		r := request{method: http.MethodPost, path: path, query: o.query(versionQuery(version)), body: batchBody(part), version: version,
			consistency: o.consistency(version)}
		if i > 0 {
			// The first part's version covered the token. A later part names that
			// version, which the API judges by its own snapshot alone once the pointer
			// moved on: it would refuse a token the first part was answered for.
			r.consistency = consistency{}
		}
		a, err := c.send(ctx, r)
		if err != nil {
			return nil, nil, "", err
		}
		var ans batchAnswer
		if err := json.Unmarshal(a.body, &ans); err != nil {
			return nil, nil, "", fmt.Errorf("snapflip: POST %s: decode the answer: %w", truncate(path, 200), err)
		}
		if err := checkVersion(r.method, path, version, ans.Version); err != nil {
			return nil, nil, "", err
		}
		version = ans.Version // the first part's version pins the others
		for id, body := range ans.Documents {
			docs[id] = Document{ID: id, JSON: body, Version: ans.Version}
		}
		missing = append(missing, ans.Missing...)
	}
	return docs, missing, version, nil
}

// listAnswer is the body of a list's 200.
type listAnswer struct {
	Version   string `json:"version"`
	Documents []struct {
		ID       string          `json:"id"`
		Document json.RawMessage `json:"document"`
	} `json:"documents"`
	NextPageToken string `json:"next_page_token"`
}

func (c *Client) list(ctx context.Context, version, collection string, opts ListOptions, read []ReadOption) iter.Seq2[Document, error] {
	return func(yield func(Document, error) bool) {
		if collection == "" {
			yield(Document{}, invalid("list: empty collection"))
			return
		}
		if err := checkFilters(opts.filters); err != nil {
			yield(Document{}, err)
			return
		}
		o, err := resolve("list", read)
		if err != nil {
			yield(Document{}, err)
			return
		}
		path := "/v1/data/" + escapeSegment(collection)
		token := ""
		for {
			// The first page names the version (if any); the next ones carry it in
			// their token, which the API reads instead of the query. The selection is
			// not in the token: every page names it.
			q := url.Values{}
			if token == "" {
				q = versionQuery(version)
			} else {
				q.Set("page_token", token)
			}
			if opts.PageSize != 0 {
				q.Set("limit", strconv.Itoa(opts.PageSize))
			}
			for _, f := range opts.filters {
				q.Add(f.field, f.expr)
			}
			o.query(q)
			a, err := c.send(ctx, request{method: http.MethodGet, path: path, query: q, version: version, consistency: o.consistency(version)})
			if err != nil {
				yield(Document{}, err)
				return
			}
			var page listAnswer
			if err := json.Unmarshal(a.body, &page); err != nil {
				yield(Document{}, fmt.Errorf("snapflip: GET %s: decode the page: %w", truncate(path, 200), err))
				return
			}
			if err := checkVersion(http.MethodGet, path, version, page.Version); err != nil {
				yield(Document{}, err)
				return
			}
			version = page.Version
			for _, d := range page.Documents {
				if !yield(Document{ID: d.ID, JSON: d.Document, Version: page.Version}, nil) {
					return
				}
			}
			if page.NextPageToken == "" {
				return
			}
			token = page.NextPageToken
		}
	}
}

// versionPattern is the API's VersionID: `<uuid>-<unix-millis>`.
var versionPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-(0|[1-9][0-9]{0,12})$`)
