package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPaths: every id is sent as exactly one path segment, which the API's single
// percent-decoding turns back into the id; dot segments are escaped so no hop can
// resolve them; a base URL's path prefix is kept.
func TestPaths(t *testing.T) {
	var (
		mu  sync.Mutex
		got []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.EscapedPath())
		mu.Unlock()
		w.Header().Set(HeaderVersion, "7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1700000000000")
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	for _, base := range []string{srv.URL, srv.URL + "/", srv.URL + "/mount/snap%20flip/"} {
		c := newClient(t, base, nil)
		prefix := strings.TrimSuffix(strings.TrimPrefix(base, srv.URL), "/") + "/v1/data/c/"
		for _, id := range append(slices.Clone(awkwardIDs), "\xff\xfe", "%2E%2E") {
			mu.Lock()
			got = nil
			mu.Unlock()
			if _, err := c.Get(t.Context(), "c", id); err != nil {
				t.Fatalf("Get(%q): %v", id, err)
			}
			mu.Lock()
			got := slices.Clone(got)
			mu.Unlock()
			if len(got) != 1 || !strings.HasPrefix(got[0], prefix) {
				t.Fatalf("Get(%q) via %s asked %q; want %s<id>", id, base, got, prefix)
			}
			seg := strings.TrimPrefix(got[0], prefix)
			dec, err := url.PathUnescape(seg)
			if err != nil || dec != id || strings.Contains(seg, "/") || seg == "." || seg == ".." {
				t.Errorf("Get(%q) sent the segment %q (decoding to %q, %v); want one segment decoding to the id", id, seg, dec, err)
			}
		}
	}
}

func TestSplitBatch(t *testing.T) {
	long := strings.Repeat("\x01", 1024) // 6 KB of JSON
	var ids []string
	for i := range 1200 {
		if i%3 == 0 {
			ids = append(ids, long[:1000]+fmt.Sprint(i))
		} else {
			ids = append(ids, fmt.Sprint("id-", i))
		}
	}
	for _, tt := range []struct{ limit, maxBytes int }{{1000, 2 << 20}, {7, 2 << 20}, {1000, 64 << 10}, {1, 16 << 10}, {5000, 16 << 10}} {
		parts := splitBatch(ids, tt.limit, tt.maxBytes)
		if joined := slices.Concat(parts...); !slices.Equal(joined, ids) {
			t.Fatalf("limit %d, %d bytes: parts do not join up to the ids", tt.limit, tt.maxBytes)
		}
		for i, p := range parts {
			body := batchBody(p)
			if len(p) == 0 || len(p) > tt.limit || len(body) > tt.maxBytes {
				t.Errorf("limit %d, %d bytes: part %d has %d ids, %d bytes", tt.limit, tt.maxBytes, i, len(p), len(body))
			}
			// Not split too eagerly: the next id would not have fitted.
			if i+1 < len(parts) && len(p) < tt.limit {
				if next := batchBody(append(slices.Clone(p), parts[i+1][0])); len(next) <= tt.maxBytes {
					t.Errorf("limit %d, %d bytes: part %d (%d ids, %d bytes) had room for the next id", tt.limit, tt.maxBytes, i, len(p), len(body))
				}
			}
		}
	}
	if parts := splitBatch(nil, 10, 1<<20); len(parts) != 0 {
		t.Errorf("splitBatch(nil) = %q; want no parts", parts)
	}
	var ids2 struct{ IDs []string }
	if err := json.Unmarshal(batchBody([]string{"<&>", "\x01"}), &ids2); err != nil || !slices.Equal(ids2.IDs, []string{"<&>", "\x01"}) {
		t.Errorf("batchBody round trip = %q, %v", ids2.IDs, err)
	}
	if b := batchBody([]string{"<&>"}); strings.Contains(string(b), `\u003c`) {
		t.Errorf("batchBody = %s; want < unescaped (6 bytes for 1 would split batches early)", b)
	}
}

func TestETagCacheBound(t *testing.T) {
	e := func(url string, n int) *cacheEntry { return &cacheEntry{url: url, etag: `"e"`, body: make([]byte, n)} }
	size := e("a", 100).size()
	c := newETagCache(3 * size)
	c.put(e("a", 100))
	c.put(e("b", 100))
	c.put(e("c", 100))
	if c.get("a") == nil { // a is now the most recently used
		t.Fatal("a evicted too early")
	}
	c.put(e("d", 100)) // evicts b, the least recently used
	if c.get("b") != nil || c.get("a") == nil || c.get("c") == nil || c.get("d") == nil || c.len() != 3 {
		t.Errorf("after a 4th entry: b %v, len %d; want b evicted, 3 left", c.get("b") != nil, c.len())
	}
	c.put(e("a", 250)) // replacing a grows it: evicts until it fits
	if c.bytes > c.maxBytes || c.get("a") == nil {
		t.Errorf("after growing a: %d bytes of %d, a cached %v", c.bytes, c.maxBytes, c.get("a") != nil)
	}
	c.put(e("huge", 1000)) // larger than the whole cache: not cached, evicts nothing
	if c.get("huge") != nil || c.get("a") == nil {
		t.Errorf("an entry larger than the cache was cached, or evicted others")
	}
	c.drop("a")
	if c.get("a") != nil || c.bytes < 0 {
		t.Errorf("drop left a cached (bytes %d)", c.bytes)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	for name, edit := range map[string]func(*Config){
		"config.Timeout":              func(c *Config) { c.Timeout = -time.Second },
		"config.CacheBytes":           func(c *Config) { c.CacheBytes = -1 },
		"config.BatchLimit":           func(c *Config) { c.BatchLimit = -1 },
		"config.MaxBatchBytes":        func(c *Config) { c.MaxBatchBytes = 1000 },
		"config.Retry.MaxAttempts":    func(c *Config) { c.Retry.MaxAttempts = -1 },
		"config.Retry.InitialBackoff": func(c *Config) { c.Retry.InitialBackoff = -time.Second },
		"config.Retry.MaxBackoff":     func(c *Config) { c.Retry.MaxBackoff = time.Millisecond },
		"config.Retry.MaxRetryAfter":  func(c *Config) { c.Retry.MaxRetryAfter = -1 },
	} {
		cfg := DefaultConfig()
		edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), name) || !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("bad %s: Validate() = %v; want an error naming it, wrapping ErrInvalidConfig", name, err)
		}
		if _, err := New("http://x", cfg); err == nil {
			t.Errorf("bad %s: New succeeded", name)
		}
	}
	// A zero field takes its default, as net/http's option structs do: the zero
	// Config is DefaultConfig but for the fields whose zero says something of its own.
	c, err := New("http://x", Config{})
	if err != nil {
		t.Fatalf("New with a zero Config: %v; want every field at its default", err)
	}
	want := DefaultConfig()
	// No bound; net/http's User-Agent (an empty one always meant it); a zero
	// RetryPolicy is the default one, Retry-After honoured.
	want.Timeout, want.UserAgent = 0, ""
	if c.cfg.UserAgent != want.UserAgent || c.cfg.BatchLimit != want.BatchLimit || c.cfg.MaxBatchBytes != want.MaxBatchBytes ||
		c.cfg.Retry != want.Retry || c.cfg.Timeout != 0 || c.cfg.CacheBytes != 0 {
		t.Errorf("a zero Config became %+v; want %+v", c.cfg, want)
	}
	for _, base := range []string{"", "x", "ftp://x", "http://", "http://x?q=1", "http://u:p@x", "http://x/#f"} {
		if _, err := New(base, DefaultConfig()); err == nil {
			t.Errorf("New(%q) succeeded; want an error", base)
		}
	}
}
