package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
)

// TestSelect: against the real server, ?select= keeps the selected fields of every
// document read (GET, batchGet, every list page), in the row's column order, their
// values byte for byte as GET of the whole document serves them; the ETag of a
// selection differs from the whole document's and answers 304 across a flip that
// changed only unselected columns; a malformed select is a 400. Every exchange is
// checked against the OpenAPI document.
func TestSelect(t *testing.T) {
	t.Parallel()
	e := start(t)
	testenv.Exec(t, e.DSN, `UPDATE things SET note = '<b>fish & chips</b>', j = '{"spaced":  [1,  2], "html": "<&>"}'`)
	out, err := e.sync(t)
	if err != nil {
		t.Fatal(err)
	}
	v := stack.PublishedVersion(t, out)
	const sel = "note,j,nope,n" // listed out of column order, with a column the rows lack

	// want is the projection made from GET's whole document: the selected columns in
	// the table's order (n, j, note), each value's bytes as GET serves them.
	want := map[string]string{}
	for _, id := range awkwardIDs {
		r := e.awaitVersion(t, docPath("things", id)+"?version="+v, v)
		var raw map[string]json.RawMessage
		mustJSON(t, r, &raw)
		want[id] = `{"n":` + string(raw["n"]) + `,"j":` + string(raw["j"]) + `,"note":` + string(raw["note"]) + `}`
	}

	for _, id := range awkwardIDs {
		if r := e.get(t, docPath("things", id)+"?select="+url.QueryEscape(sel)+"&version="+v); r.status != 200 || string(r.body) != want[id] {
			t.Errorf("GET things/%q?select=%s = %d %s; want %s", id, sel, r.status, r.body, want[id])
		}
	}

	ids, _ := json.Marshal(map[string][]string{"ids": awkwardIDs})
	req, _ := http.NewRequest(http.MethodPost, e.Base+"/v1/data/things:batchGet?select="+url.QueryEscape(sel)+"&version="+v, bytes.NewReader(ids))
	req.Header.Set("Content-Type", "application/json")
	resp, body := callAPI(t, req)
	var batch struct {
		Documents map[string]json.RawMessage `json:"documents"`
	}
	if err := json.Unmarshal(body, &batch); err != nil || resp.StatusCode != 200 {
		t.Fatalf("batchGet?select= = %d %s, %v", resp.StatusCode, body, err)
	}
	for _, id := range awkwardIDs {
		if got := string(batch.Documents[id]); got != want[id] {
			t.Errorf("batchGet?select= things/%q = %s; want %s", id, got, want[id])
		}
	}

	listed := 0
	for tok := ""; ; {
		r := e.get(t, "/v1/data/things?limit=3&select="+url.QueryEscape(sel)+"&version="+v+"&page_token="+url.QueryEscape(tok))
		var page listPage
		mustJSON(t, r, &page)
		if page.Version != v {
			t.Errorf("a list page of version %s; want %s", page.Version, v)
		}
		for _, d := range page.Documents {
			if w, ok := want[d.ID]; ok {
				listed++
				if string(d.Document) != w {
					t.Errorf("list?select= things/%q = %s; want %s", d.ID, d.Document, w)
				}
			}
		}
		if tok = page.NextPageToken; tok == "" {
			break
		}
	}
	if listed != len(awkwardIDs) {
		t.Errorf("the list held %d of the %d documents", listed, len(awkwardIDs))
	}

	// ETags: a selection's differs from the whole document's; a flip that changes only
	// an unselected column keeps it, and If-None-Match answers 304.
	etag := func(path, inm string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, e.Base+path, nil)
		if inm != "" {
			req.Header.Set("If-None-Match", inm)
		}
		resp, _ := callAPI(t, req)
		return resp.StatusCode, resp.Header.Get("ETag")
	}
	selPath := docPath("things", "plain") + "?select=note,n"
	_, whole := etag(docPath("things", "plain"), "")
	_, selected := etag(selPath, "")
	if whole == selected || whole == "" || selected == "" {
		t.Errorf("ETag whole %s, selected %s; want two different tags", whole, selected)
	}
	testenv.Exec(t, e.DSN, `UPDATE things SET gen = gen + 1 WHERE id = 'plain'`)
	out, err = e.sync(t)
	if err != nil {
		t.Fatal(err)
	}
	e.awaitVersion(t, docPath("things", "plain"), stack.PublishedVersion(t, out))
	if code, tag := etag(selPath, selected); code != http.StatusNotModified || tag != selected {
		t.Errorf("after a flip changing only gen: GET %s, If-None-Match %s = %d, ETag %s; want 304", selPath, selected, code, tag)
	}
	if code, _ := etag(docPath("things", "plain"), whole); code != http.StatusOK {
		t.Errorf("after a flip changing gen: GET of the whole document, If-None-Match its old ETag = %d; want 200", code)
	}

	for _, q := range []string{"select=", "select=a,,b", "select=n,n", "select=%00", "select=" + strings.Repeat("x,", 200) + "y"} {
		if r := e.get(t, docPath("things", "plain")+"?"+q); r.status != http.StatusBadRequest || r.ctype != "application/problem+json" {
			t.Errorf("GET things/plain?%.40s = %d %s; want a 400 problem", q, r.status, r.body)
		}
	}
}
