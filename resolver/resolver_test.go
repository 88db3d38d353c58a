package resolver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snapflip/snapflip/snapshot"
)

// countingStore is a pure-logic ReadStore that counts pointer reads and can block
// them, to test the resolver's refresh rules. Real storage is tested in store/ and e2e/.
type countingStore struct {
	reads   atomic.Int64
	gate    chan struct{} // when non-nil, each pointer read waits on it
	mu      sync.Mutex
	ptr     snapshot.Pointer
	ptrErr  error
	states  map[snapshot.Version]snapshot.State
	formats map[snapshot.Version]int // a manifest's format; 0 when absent
	getDocs atomic.Int64
	readc   chan struct{} // closed at the next pointer read; see awaitReads
}

func (s *countingStore) ReadPointer(ctx context.Context, _ string) (snapshot.Pointer, error) {
	s.mu.Lock()
	s.reads.Add(1)
	if s.readc != nil {
		close(s.readc)
		s.readc = nil
	}
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		<-gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ptr, s.ptrErr
}

// awaitReads waits until n pointer reads have begun, and fails the test if they have
// not within 10 s. (It is told of each read rather than polling: this package's tests
// cannot use testenv, which imports store.)
func (s *countingStore) awaitReads(tb testing.TB, n int64) {
	tb.Helper()
	timeout := time.After(time.Minute)
	for {
		s.mu.Lock()
		if s.reads.Load() >= n {
			s.mu.Unlock()
			return
		}
		if s.readc == nil {
			s.readc = make(chan struct{})
		}
		readc := s.readc
		s.mu.Unlock()
		select {
		case <-readc:
		case <-timeout:
			tb.Fatalf("%d pointer reads after 10s; want %d", s.reads.Load(), n)
		}
	}
}

func (s *countingStore) ReadManifest(_ context.Context, _ string, v snapshot.Version) (snapshot.Manifest, error) {
	st, ok := s.states[v]
	if !ok {
		return snapshot.Manifest{}, snapshot.ErrNotFound
	}
	return snapshot.Manifest{Version: v, State: st, Format: s.formats[v], Collections: map[string]snapshot.CollectionStats{"c": {}}}, nil
}

func (s *countingStore) GetDocument(context.Context, snapshot.ChainRef, string) ([]byte, error) {
	s.getDocs.Add(1)
	return []byte(`{}`), nil
}

func (s *countingStore) GetDocuments(_ context.Context, _ snapshot.ChainRef, ids []string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, id := range ids {
		out[id] = []byte(`{}`)
	}
	return out, nil
}

func (s *countingStore) ScanPage(context.Context, snapshot.ChainRef, string, int) ([]snapshot.Document, bool, error) {
	return nil, false, nil
}

func (s *countingStore) ScanEntries(context.Context, snapshot.ChainRef, snapshot.Span, int) ([]snapshot.Document, bool, error) {
	return nil, false, nil
}

func (s *countingStore) ScanRun(context.Context, string, snapshot.Version, string, func([]byte) bool) error {
	return nil
}

func (s *countingStore) RecentManifests(context.Context, string, snapshot.Version, int) ([]snapshot.Manifest, error) {
	return nil, nil
}

func TestResolverReadsThePointerAtMostOncePerRefresh(t *testing.T) {
	st := &countingStore{ptr: snapshot.Pointer{Version: "v1"}, states: map[snapshot.Version]snapshot.State{"v1": snapshot.StatePublished}}
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r := mustNew(t, "ds", st, Config{Refresh: time.Second}, clock)
	ctx := context.Background()
	for range 100 {
		if _, err := r.Current(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := st.reads.Load(); got != 1 {
		t.Errorf("100 reads within one refresh interval read the pointer %d times; want 1", got)
	}
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	if _, err := r.Current(ctx); err != nil {
		t.Fatal(err)
	}
	// The pointer is a refresh interval old: the request waits for a new read.
	st.awaitReads(t, 2)
	if got := st.reads.Load(); got != 2 {
		t.Errorf("after the interval the pointer was read %d times; want 2", got)
	}
}

func TestResolverOneRefreshInFlight(t *testing.T) {
	st := &countingStore{ptr: snapshot.Pointer{Version: "v1"}, states: map[snapshot.Version]snapshot.State{"v1": snapshot.StatePublished}, gate: make(chan struct{})}
	r := mustNew(t, "ds", st, Config{Refresh: time.Second}, nil)
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.Current(context.Background()); err != nil {
				t.Error(err)
			}
		}()
	}
	// Wait until the one refresh is in flight, then let it finish.
	st.awaitReads(t, 1)
	close(st.gate)
	wg.Wait()
	if got := st.reads.Load(); got != 1 {
		t.Errorf("50 concurrent requests made %d pointer reads; want 1", got)
	}
}

func TestResolverServesLastGoodPointerWhileStorageFails(t *testing.T) {
	st := &countingStore{ptr: snapshot.Pointer{Version: "v1"}, states: map[snapshot.Version]snapshot.State{"v1": snapshot.StatePublished}}
	now := time.Unix(1000, 0)
	r := mustNew(t, "ds", st, Config{Refresh: time.Second, MaxStale: 10 * time.Second}, func() time.Time { return now })
	ctx := context.Background()
	if _, err := r.Current(ctx); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	st.ptrErr = errors.New("bigtable down")
	st.mu.Unlock()
	now = now.Add(5 * time.Second)
	if v, err := r.Current(ctx); err != nil || v.Version != "v1" {
		t.Errorf("within MaxStale: %v, %v; want the last good v1", v.Version, err)
	}
	now = now.Add(10 * time.Second)
	if _, err := r.Current(ctx); err == nil {
		t.Error("past MaxStale: no error; want the storage error")
	}
	if err := r.Ready(ctx); err == nil {
		t.Error("Ready past MaxStale = nil; want an error")
	}
}

func TestResolverRefusesIncompleteVersions(t *testing.T) {
	st := &countingStore{ptr: snapshot.Pointer{Version: "v1"}, states: map[snapshot.Version]snapshot.State{"v1": snapshot.StatePublished, "w": snapshot.StateWriting, "f": snapshot.StateFailed,
		"u": snapshot.StateUnchanged}}
	r := mustNew(t, "ds", st, Config{}, nil)
	for _, v := range []snapshot.Version{"w", "f", "u", "nope"} {
		if _, err := r.View(context.Background(), v); !errors.Is(err, snapshot.ErrGone) {
			t.Errorf("View(%s) = %v; want ErrGone", v, err)
		}
	}
	view, err := r.View(context.Background(), "v1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(context.Background(), view, "other", "x"); !errors.Is(err, snapshot.ErrNotFound) {
		t.Errorf("Get(unknown collection) = %v; want ErrNotFound", err)
	}
	if st.getDocs.Load() != 0 {
		t.Error("an unknown collection reached storage")
	}
}

// A manifest format this release does not know is refused (410), never served as if
// it were one it knows; formats 0 (full copy) and 2 (layered) are served.
func TestResolverRefusesUnknownFormats(t *testing.T) {
	st := &countingStore{states: map[snapshot.Version]snapshot.State{"full": snapshot.StatePublished, "layered": snapshot.StatePublished, "future": snapshot.StatePublished},
		formats: map[snapshot.Version]int{"layered": snapshot.FormatLayered, "future": 4}}
	r := mustNew(t, "ds", st, Config{}, nil)
	for _, v := range []snapshot.Version{"full", "layered"} {
		if _, err := r.View(context.Background(), v); err != nil {
			t.Errorf("View(%s) = %v; want it served", v, err)
		}
	}
	if _, err := r.View(context.Background(), "future"); !errors.Is(err, snapshot.ErrGone) || !strings.Contains(err.Error(), "format 4") {
		t.Errorf("View(a format-4 manifest) = %v; want ErrGone naming the format", err)
	}
}

// TestResolverIdleReplicaServesTheNewPointer: with Run, a replica that serves no
// request still notices a flip within one refresh interval, and the first request
// after the quiet spell gets the new version without waiting for a read.
func TestResolverIdleReplicaServesTheNewPointer(t *testing.T) {
	st := &countingStore{ptr: snapshot.Pointer{Version: "v1"}}
	// A refresh interval far longer than the test's own steps take on a loaded
	// machine: the request below comes long before the next read is due.
	r := mustNew(t, "ds", st, Config{Refresh: time.Second}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	if p, err := r.Pointer(ctx); err != nil || p.Version != "v1" {
		t.Fatalf("Pointer = %v, %v; want v1", p.Version, err)
	}
	st.mu.Lock()
	st.ptr = snapshot.Pointer{Version: "v2"}
	st.mu.Unlock()
	// No request for a while; the refresher keeps reading.
	before := st.reads.Load()
	st.awaitReads(t, before+2)
	// From now on a pointer read would block: the request must not need one.
	st.mu.Lock()
	st.gate = make(chan struct{})
	st.mu.Unlock()
	defer close(st.gate)
	got := make(chan snapshot.Version, 1)
	go func() {
		p, _ := r.Pointer(ctx)
		got <- p.Version
	}()
	select {
	case v := <-got:
		if v != "v2" {
			t.Errorf("first request after a quiet spell resolved through %s; want v2", v)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first request after a quiet spell waited for a pointer read")
	}
}

// TestResolverNeverServesAPointerOlderThanTheBound: without a failure, a pointer read
// more than one refresh interval plus one timeout ago is never served: the request
// waits for a new read.
func TestResolverNeverServesAPointerOlderThanTheBound(t *testing.T) {
	st := &countingStore{ptr: snapshot.Pointer{Version: "v1"}}
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r := mustNew(t, "ds", st, Config{Refresh: time.Second, Timeout: time.Second, MaxStale: time.Hour}, clock)
	ctx := context.Background()
	if p, _ := r.Pointer(ctx); p.Version != "v1" {
		t.Fatalf("Pointer = %s; want v1", p.Version)
	}
	st.mu.Lock()
	st.ptr = snapshot.Pointer{Version: "v2"}
	st.mu.Unlock()
	for _, after := range []time.Duration{time.Second, 30 * time.Second, 59 * time.Second} {
		mu.Lock()
		now = now.Add(after)
		mu.Unlock()
		if p, err := r.Pointer(ctx); err != nil || p.Version != "v2" {
			t.Errorf("%s later: Pointer = %s, %v; want v2 (never the pointer read before the flip)", after, p.Version, err)
		}
	}
}

// TestResolverAnswersAtOnceWhileStorageFails: once a pointer read has failed, requests
// do not wait for the next doomed read: they get the last good pointer within
// MaxStale, the error past it, at once.
func TestResolverAnswersAtOnceWhileStorageFails(t *testing.T) {
	st := &countingStore{ptr: snapshot.Pointer{Version: "v1"}}
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	r := mustNew(t, "ds", st, Config{Refresh: time.Second, Timeout: time.Minute, MaxStale: 10 * time.Second}, clock)
	ctx := context.Background()
	if _, err := r.Pointer(ctx); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	st.ptrErr = errors.New("bigtable down")
	st.mu.Unlock()
	advance(2 * time.Second)
	if p, err := r.Pointer(ctx); err != nil || p.Version != "v1" { // this one waits for the failing read
		t.Fatalf("first read after the failure = %s, %v; want the last good v1", p.Version, err)
	}
	// Every later read would hang: nobody may wait for one.
	gate := make(chan struct{})
	st.mu.Lock()
	st.gate = gate
	st.mu.Unlock()
	defer close(gate)
	for _, tc := range []struct {
		after   time.Duration
		wantErr bool
	}{{time.Second, false}, {3 * time.Second, false}, {5 * time.Second, true}, {time.Minute, true}} {
		advance(tc.after)
		done := make(chan error, 1)
		go func() { _, err := r.Pointer(ctx); done <- err }()
		select {
		case err := <-done:
			if (err != nil) != tc.wantErr {
				t.Errorf("%s more: err = %v; want error %t", tc.after, err, tc.wantErr)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s more: a read waited for a pointer read while storage fails", tc.after)
		}
	}
	if err := r.Ready(ctx); err == nil {
		t.Error("Ready past MaxStale = nil; want the storage error")
	}
}

// TestResolverServesStaleAfterASlowFailure: a request that had to wait for a pointer
// read that then failed (Bigtable just went away, and the read took its whole timeout
// to fail) gets the last good pointer if it was within MaxStale when the request came.
func TestResolverServesStaleAfterASlowFailure(t *testing.T) {
	st := &countingStore{ptr: snapshot.Pointer{Version: "v1"}}
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r := mustNew(t, "ds", st, Config{Refresh: time.Second, Timeout: 5 * time.Second, MaxStale: 2 * time.Second}, clock)
	ctx := context.Background()
	if _, err := r.Pointer(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(1500 * time.Millisecond)
	mu.Unlock()
	gate := make(chan struct{})
	st.mu.Lock()
	st.ptrErr, st.gate = errors.New("bigtable down"), gate
	st.mu.Unlock()
	got := make(chan error, 1)
	go func() { _, err := r.Pointer(ctx); got <- err }()
	st.awaitReads(t, 2)
	mu.Lock()
	now = now.Add(5 * time.Second) // the read takes its whole timeout to fail
	mu.Unlock()
	close(gate)
	if err := <-got; err != nil {
		t.Errorf("Pointer after a read that failed slowly = %v; want the last good pointer, 1.5s old when asked", err)
	}
}

// monotonicStore answers each pointer read with a newer version, after a random delay,
// so reads overlap and finish out of the order they were asked in if they can.
type monotonicStore struct {
	countingStore
	n atomic.Int64
}

func (s *monotonicStore) ReadPointer(context.Context, string) (snapshot.Pointer, error) {
	n := s.n.Add(1)
	time.Sleep(time.Duration(n%3) * time.Millisecond)
	return snapshot.Pointer{Version: snapshot.Version(fmt.Sprintf("v%06d", n))}, nil
}

// TestResolverNeverGoesBack: a replica never serves an older version after a newer one
// (bounded staleness, docs/design.md): however requests and the refresher interleave, each reader
// sees versions in order.
func TestResolverNeverGoesBack(t *testing.T) {
	st := &monotonicStore{}
	r := mustNew(t, "ds", st, Config{Refresh: time.Millisecond}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last snapshot.Version
			for st.n.Load() < 50 { // until the pointer has been read 50 times
				p, err := r.Pointer(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if p.Version < last {
					t.Errorf("served %s after %s", p.Version, last)
					return
				}
				last = p.Version
			}
		}()
	}
	wg.Wait()
}

// A flip the pointer refresh cannot load (here: the version is not servable) is still
// swapped in, and the request path reads it again and reports why it cannot serve it.
func TestFlipThatFailsToLoadIsReportedByRequests(t *testing.T) {
	st := &countingStore{ptr: snapshot.Pointer{Version: "v2"}, states: map[snapshot.Version]snapshot.State{"v1": snapshot.StatePublished, "v2": snapshot.StateWriting}}
	r := mustNew(t, "ds", st, Config{Refresh: time.Second}, nil)
	ctx := context.Background()
	if p, err := r.Pointer(ctx); err != nil || p.Version != "v2" {
		t.Fatalf("Pointer = %v, %v; want v2 (loading it failed, reading it did not)", p.Version, err)
	}
	_, err := r.Current(ctx)
	if !errors.Is(err, snapshot.ErrCurrentExpired) || !strings.Contains(err.Error(), "v2 is writing, never served") {
		t.Errorf("Current through a pointer to a version writing = %v; want ErrCurrentExpired naming its state", err)
	}
}

func TestResolverConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // in the error; "" for none
	}{
		{"zero takes the defaults", Config{}, ""},
		{"defaults", DefaultConfig(), ""},
		{"negative cache size turns the cache off", Config{CacheSize: -1}, ""},
		{"negative refresh", Config{Refresh: -time.Second}, "Refresh -1s is negative"},
		{"negative timeout", Config{Timeout: -time.Second}, "Timeout -1s is negative"},
		{"negative max stale", Config{MaxStale: -time.Second}, "MaxStale -1s is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate() = %v; want nil", err)
			case tc.want != "" && (!errors.Is(err, snapshot.ErrInvalid) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate() = %v; want ErrInvalid naming %q", err, tc.want)
			}
		})
	}
	if _, err := New("ds", &countingStore{}, Config{MaxStale: -time.Second}, nil); !errors.Is(err, snapshot.ErrInvalid) {
		t.Errorf("New with a negative MaxStale = %v; want ErrInvalid", err)
	}
	if got, want := (Config{CacheSize: -1}).withDefaults(), (Config{Refresh: 200 * time.Millisecond,
		Timeout: 5 * time.Second, MaxStale: time.Minute, CacheSize: -1, MaxWaiters: DefaultMaxWaiters}); got != want {
		t.Errorf("withDefaults() = %+v; want %+v", got, want)
	}
}

// mustNew returns a Resolver over st, failing the test on a bad config.
func mustNew(t testing.TB, dataset string, st ReadStore, cfg Config, now func() time.Time) *Resolver {
	t.Helper()
	r, err := New(dataset, st, cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
