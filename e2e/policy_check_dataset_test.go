package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ---- What reports on several collections ----

// checkCollections: the collections the caller reads, a count and bytes for those it
// reads whole, "scoped" alone for the others.
func (p *policyProbe) checkCollections() {
	const route = "GET /v1/collections"
	a := p.get("/v1/collections", p.pin()...)
	var got struct {
		Collections []struct {
			Name   string `json:"name"`
			Count  *int64 `json:"count"`
			Bytes  *int64 `json:"bytes"`
			Scoped bool   `json:"scoped"`
		} `json:"collections"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.body, &got) != nil {
		p.failRead(route, "GET /v1/collections", a, "200")
		return
	}
	var have, want []string
	for _, c := range got.Collections {
		have = append(have, describeCollection(c.Name, c.Count, c.Bytes != nil, c.Scoped))
	}
	for _, c := range policyCollections {
		switch n := int64(len(p.w.rows[p.at][c])); p.dec[c].access {
		case whole:
			want = append(want, describeCollection(c, &n, true, false))
		case scoped:
			want = append(want, describeCollection(c, nil, false, true))
		}
	}
	if !slices.Equal(have, want) {
		p.fail(route, ruleCounts, "GET /v1/collections", fmt.Sprintf("%q", have), fmt.Sprintf("%q", want))
	}
}

func describeCollection(name string, count *int64, bytes, scoped bool) string {
	s := name
	if count != nil {
		s += fmt.Sprintf(" count=%d", *count)
	}
	if bytes {
		s += " bytes"
	}
	if scoped {
		s += " scoped"
	}
	return s
}

// versionCounts is what a version's description may tell of its collections.
type versionCounts struct {
	Version      string           `json:"version"`
	Counts       map[string]int64 `json:"counts"`
	BytesWritten int64            `json:"bytes_written"`
}

// checkVersions: every description of a version counts only the collections the
// caller reads whole, and tells the bytes written only to one that reads all whole.
func (p *policyProbe) checkVersions() {
	a := p.get("/v1/versions")
	var list struct {
		Versions []versionCounts `json:"versions"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.body, &list) != nil {
		p.failRead("GET /v1/versions", "GET /v1/versions", a, "200")
		return
	}
	for _, v := range list.Versions {
		p.checkCounts("GET /v1/versions", "GET /v1/versions", v)
	}
	named := p.w.versions[p.rng.IntN(len(p.w.versions))]
	for _, ask := range []struct{ route, target string }{
		{"GET /v1/versions/current", "/v1/versions/current"}, {"GET /v1/versions/{v}", "/v1/versions/" + named},
	} {
		a := p.get(ask.target)
		var v versionCounts
		if a.status != http.StatusOK || json.Unmarshal(a.body, &v) != nil {
			p.failRead(ask.route, "GET "+ask.target, a, "200")
			continue
		}
		p.checkCounts(ask.route, "GET "+ask.target, v)
	}
}

func (p *policyProbe) checkCounts(route, request string, v versionCounts) {
	at, ok := p.w.index[v.Version]
	if !ok {
		return // not a version of the world's history
	}
	want, all := map[string]int64{}, true
	for _, c := range policyCollections {
		if p.dec[c].access == whole {
			want[c] = int64(len(p.w.rows[at][c]))
		} else {
			all = false
		}
	}
	if !maps.Equal(v.Counts, want) || !all && v.BytesWritten != 0 {
		wantBytes := ""
		if !all {
			wantBytes = ", bytes_written 0"
		}
		p.fail(route, ruleCounts, request+fmt.Sprintf(" (version %d)", at+1),
			fmt.Sprintf("counts %v, bytes_written %d", v.Counts, v.BytesWritten), fmt.Sprintf("counts %v%s", want, wantBytes))
	}
}

// checkStatus: the status page, which shows every collection's rows and bytes, only
// for a caller the model gives every collection whole (and what "*" decides).
func (p *policyProbe) checkStatus() {
	everything := !slices.ContainsFunc(slices.Collect(maps.Values(p.dec)), func(d decision) bool { return d.access != whole })
	a := p.get("/")
	want := http.StatusForbidden
	if everything {
		want = http.StatusOK
	}
	if a.status != want {
		p.stats.statusWrong.Add(1)
		p.fail("GET /", ruleStatus, "GET /", fmt.Sprintf("%d", a.status), strconv.Itoa(want))
	}
}

// checkWatch reads the first flip event: the collections the caller reads, with
// their rows when it reads them whole, "scoped" alone when through a scope.
func (p *policyProbe) checkWatch() {
	const route = "GET /v1/watch"
	a, ev := p.watchFirst()
	cols, ok := ev["collections"].(map[string]any)
	if a.status != http.StatusOK || !ok {
		p.failRead(route, "GET /v1/watch", a, "200 and a flip event")
		return
	}
	var have, want []string
	for name, v := range cols {
		have = append(have, describeFlip(name, v))
	}
	slices.Sort(have)
	last := len(p.w.versions) - 1
	for _, c := range policyCollections {
		switch p.dec[c].access {
		case whole:
			want = append(want, fmt.Sprintf("%s rows=%d", c, len(p.w.rows[last][c])))
		case scoped:
			want = append(want, c+" scoped")
		}
	}
	if !slices.Equal(have, want) {
		p.fail(route, ruleWatch, "GET /v1/watch, the first flip event", fmt.Sprintf("%q", have), fmt.Sprintf("%q", want))
	}
}

// describeFlip describes a flip event's collection: its rows, or "scoped" and
// whatever else a scoped one carries.
func describeFlip(name string, v any) string {
	m, _ := v.(map[string]any)
	if m["scoped"] != true {
		return fmt.Sprintf("%s rows=%v", name, m["rows"])
	}
	s := name + " scoped"
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k != "scoped" {
			s += " +" + k
		}
	}
	return s
}

// watchFirst opens GET /v1/watch and returns the answer up to its first flip event,
// and that event's data.
func (p *policyProbe) watchFirst() (answer, map[string]any) {
	p.stats.requests.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/v1/watch", nil)
	req.Header.Set("Authorization", "Bearer "+p.raw)
	rec := &sseRecorder{header: http.Header{}, flip: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.srv.ServeHTTP(rec, req)
	}()
	select {
	case <-rec.flip:
	case <-done:
	case <-ctx.Done():
	}
	cancel()
	<-done
	a := answer{status: rec.status, header: rec.header, body: rec.buf.Bytes()}
	events, _ := splitEvents(a.body)
	for _, e := range events {
		if e.event == "flip" {
			var ev map[string]any
			dec := json.NewDecoder(strings.NewReader(e.data))
			dec.UseNumber()
			_ = dec.Decode(&ev)
			return a, ev
		}
	}
	return a, nil
}

// sseRecorder is a ResponseWriter for a stream: it closes flip once a flip event is
// written whole.
type sseRecorder struct {
	header http.Header
	flip   chan struct{}

	mu     sync.Mutex
	status int
	buf    bytes.Buffer
	closed bool
}

func (s *sseRecorder) Header() http.Header { return s.header }

func (s *sseRecorder) WriteHeader(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status == 0 {
		s.status = code
	}
}

func (s *sseRecorder) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status == 0 {
		s.status = http.StatusOK
	}
	s.buf.Write(b)
	if events, _ := splitEvents(s.buf.Bytes()); !s.closed && slices.ContainsFunc(events, func(e sseEvent) bool { return e.event == "flip" }) {
		s.closed = true
		close(s.flip)
	}
	return len(b), nil
}

// Flush lets the stream flush (http.ResponseController); the bytes are in buf already.
func (s *sseRecorder) Flush() {}
