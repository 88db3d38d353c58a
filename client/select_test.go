package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/snapflip/snapflip/internal/testenv/stack"
)

// TestSelect: Select keeps the named fields on Get, BatchGet and every List page, of
// a Client and of a Snapshot, in the row's column order with the bytes stored; Get's
// ETag is the selection's own and the ETag cache keeps it apart from the whole
// document; a selection the API cannot carry fails before anything is sent.
func TestSelect(t *testing.T) {
	e := start(t, config)
	v := e.sync(t)
	e.await(t, v)
	ctx := context.Background()
	// want: each row cut to (id, note), columns in table order, values as stored.
	want := map[string]string{}
	for id, doc := range stack.SourceDocs(t, e.DSN, `SELECT id, to_json(t)::text FROM docs t`) {
		var raw map[string]json.RawMessage
		if err := json.Unmarshal([]byte(doc), &raw); err != nil {
			t.Fatal(err)
		}
		want[id] = `{"id":` + string(raw["id"]) + `,"note":` + string(raw["note"]) + `}`
	}
	sel := Select("note", "id", "nope", "note") // out of order, a missing field, a repeat
	rec := newRecorder(nil)
	c := newClient(t, e.Base, func(c *Config) { c.HTTPClient = &http.Client{Transport: rec}; c.CacheBytes = 1 << 20 })
	snap, err := c.Pin(v)
	if err != nil {
		t.Fatal(err)
	}

	for _, r := range []reader{c, snap} {
		got := map[string]string{}
		for _, id := range awkwardIDs {
			d, err := r.Get(ctx, "docs", id, sel)
			if err != nil {
				t.Fatalf("Get(%q, Select): %v", id, err)
			}
			got[id] = string(d.JSON)
		}
		docs, _, _, err := r.BatchGet(ctx, "docs", awkwardIDs, sel)
		if err != nil {
			t.Fatal(err)
		}
		for id, d := range docs {
			if string(d.JSON) != got[id] {
				t.Errorf("BatchGet(Select) %q = %s; Get(Select) %s", id, d.JSON, got[id])
			}
		}
		for d, err := range r.List(ctx, "docs", ListOptions{PageSize: 7}, sel) {
			if err != nil {
				t.Fatal(err)
			}
			got[d.ID] = string(d.JSON)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%T: documents read with Select (-want +got):\n%s", r, diff)
		}
	}
	for _, x := range rec.exchanges() {
		if q, _ := url.ParseQuery(x.rawQuery); q.Get("select") != "note,id,nope" {
			t.Errorf("%s %s?%s: select %q; want note,id,nope on every request", x.method, x.path, x.rawQuery, q.Get("select"))
		}
	}

	whole, err := c.Get(ctx, "docs", "plain")
	if err != nil {
		t.Fatal(err)
	}
	part, err := c.Get(ctx, "docs", "plain", sel)
	if err != nil {
		t.Fatal(err)
	}
	xs := rec.exchanges()
	if whole.ETag == part.ETag || string(whole.JSON) == string(part.JSON) || len(xs) != 2 || xs[1].status != http.StatusNotModified {
		t.Errorf("whole %s %s, selected %s %s, exchanges %+v; want two ETags, and the selection revalidated (304) from its own cache entry",
			whole.ETag, whole.JSON, part.ETag, part.JSON, xs)
	}

	for _, bad := range []ReadOption{Select(), Select("a,b"), Select("id", "")} {
		_, err := c.Get(ctx, "docs", "plain", bad)
		_, _, _, berr := c.BatchGet(ctx, "docs", []string{"plain"}, bad)
		var lerr error
		for _, err := range c.List(ctx, "docs", ListOptions{}, bad) {
			lerr = err
			break
		}
		for _, err := range []error{err, berr, lerr} {
			if !errors.Is(err, ErrBadRequest) {
				t.Errorf("a selection the API cannot carry: %v; want ErrBadRequest", err)
			}
		}
		if xs := rec.exchanges(); len(xs) != 0 {
			t.Errorf("a selection the API cannot carry sent %+v; want nothing sent", xs)
		}
	}
	var many []string
	for i := range 101 {
		many = append(many, "f"+strconv.Itoa(i))
	}
	if _, err := c.Get(ctx, "docs", "plain", Select(many...)); !errors.Is(err, ErrBadRequest) {
		t.Errorf("Select of 101 fields: %v; want the API's 400 as ErrBadRequest", err)
	}
}
