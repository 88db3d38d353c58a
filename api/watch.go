package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/snapflip/snapflip/snapshot"
)

// FlipKind is what a client that holds the version a watch stream last named must do
// with the version of a flip event: its "kind".
type FlipKind string

// The kinds of a flip event.
const (
	// FlipChild: the new version's parent is the version the stream last named; its
	// collections' own layers say what changed since.
	FlipChild FlipKind = "child"
	// FlipRollback: an operator rolled the pointer back (it is pinned); reload.
	FlipRollback FlipKind = "rollback"
	// FlipBase: a new base, a full copy, or a lineage the stream cannot vouch for (the
	// client's version is not the parent); reload.
	FlipBase FlipKind = "base"
)

// watchRetry is the reconnection delay a watch stream suggests (its retry field) and
// the Retry-After of a watch refused for the limit or the shutdown.
const watchRetry = 2 * time.Second

// watchWriteTimeout bounds each write to a watch stream: a client that stops reading
// loses its stream instead of holding a slot for ever.
const watchWriteTimeout = 30 * time.Second

// flipsKept is how many changes the broadcaster keeps for watchers that have not
// written them yet; one further behind skips to the oldest kept, and the kind of its
// next event says whether the lineage still holds.
const flipsKept = 64

// flipEvent is the data of one event of GET /v1/watch. It is made from the pointer and
// the manifest alone, so every replica that sees a flip describes it the same way.
type flipEvent struct {
	Version snapshot.Version `json:"version"`
	// Parent is the version the new version's layers were computed against (the
	// manifest's parent); absent for a full copy or a first version.
	Parent snapshot.Version `json:"parent,omitempty"`
	// Previous is the version the flip replaced (the pointer's).
	Previous snapshot.Version `json:"previous,omitempty"`
	// Kind is what the flip is to a stream, against the version it last named
	// (flipKind); a flipRecord holds the event marshalled for each kind it may take.
	Kind        FlipKind                  `json:"kind"`
	Pinned      bool                      `json:"pinned"`
	PinReason   string                    `json:"pin_reason,omitempty"`
	FlippedAt   time.Time                 `json:"flipped_at"`
	Collections map[string]flipCollection `json:"collections"`
	// Token is the read-your-writes token of the version's own snapshot; Covers that
	// of the newest snapshot the version is known to hold (a "covered" event says
	// when it grows without a flip).
	Token  string `json:"token,omitempty"`
	Covers string `json:"covers,omitempty"`
}

// coveredEvent is the data of a "covered" event: the pointer did not move, but a
// sync found the source unchanged at a newer snapshot, which the version covers.
type coveredEvent struct {
	Version snapshot.Version `json:"version"`
	Covers  string           `json:"covers"`
}

// flipCollection is one collection of a flip event.
type flipCollection struct {
	// Rows, and Own, are absent for a collection the stream's caller reads through a
	// row scope (Scoped).
	Rows   *int64 `json:"rows,omitempty"`
	Scoped bool   `json:"scoped,omitempty"`
	// Own is what the version's own layer changed against its parent; absent for a
	// full copy, which does not record it.
	Own *flipOwn `json:"own,omitempty"`
	// Held, for a held collection, says where it stands (HeldInfo).
	Held *HeldInfo `json:"held,omitempty"`
}

// flipOwn counts the ids a version's own layer of a collection changed.
type flipOwn struct {
	// Layer is what the publish wrote: "base", "delta", or "none" when nothing changed.
	Layer string `json:"layer"`
	// IDs is inserted + changed + deleted: the ids whose document differs from the
	// parent's.
	IDs      int64 `json:"ids"`
	Inserted int64 `json:"inserted"`
	Changed  int64 `json:"changed"`
	Deleted  int64 `json:"deleted"`
}

func newFlipEvent(p snapshot.Pointer, m snapshot.Manifest) flipEvent {
	ev := flipEvent{Version: p.Version, Parent: m.Parent, Previous: p.Previous, Pinned: p.Pinned,
		FlippedAt: p.FlippedAt, Collections: make(map[string]flipCollection, len(m.Collections)),
		Token: m.Source.Token(m.Version), Covers: coversToken(p)}
	if p.Pinned {
		ev.PinReason = p.Reason
	}
	for name, c := range m.Collections {
		fc := flipCollection{Rows: &c.Rows, Held: heldInfo(c)}
		if o := c.Own; o != nil {
			layer := string(o.Kind)
			switch {
			case o.Rebased:
				layer = "base" // the collection took a base read beside the stream: reload it
			case o.Kind == snapshot.LayerNone || o.Kind == "":
				layer = "none"
			}
			fc.Own = &flipOwn{Layer: layer, IDs: o.Inserted + o.Changed + o.Deleted,
				Inserted: o.Inserted, Changed: o.Changed, Deleted: o.Deleted}
		}
		ev.Collections[name] = fc
	}
	return ev
}

// flipKind says what a flip to ev is to a client that holds last ("" when it holds
// nothing the stream knows of).
func flipKind(last snapshot.Version, ev flipEvent) FlipKind {
	switch {
	case last != "" && ev.Parent == last:
		return FlipChild
	case ev.Pinned: // only a rollback moves the pointer and pins it
		return FlipRollback
	}
	return FlipBase
}

// flipRecord is one change of the pointer, numbered in the order the broadcaster saw
// them. Its event is marshalled once for every stream, for each kind a stream may
// give it: the data of the events differ by their kind alone.
type flipRecord struct {
	seq   uint64
	event flipEvent
	data  map[FlipKind][]byte
	// covered marks a record of coverage alone (event.Version and event.Covers); its
	// data is the "covered" event's.
	covered []byte
}

// newFlipRecord describes a flip to ev: child to a stream that last named its parent,
// and to any other what flipKind says then.
func newFlipRecord(ev flipEvent) (flipRecord, error) {
	rec := flipRecord{event: ev, data: make(map[FlipKind][]byte, 2)}
	kinds := []FlipKind{flipKind("", ev)}
	if ev.Parent != "" {
		kinds = append(kinds, FlipChild)
	}
	for _, kind := range kinds {
		ev.Kind = kind
		data, err := json.Marshal(ev)
		if err != nil {
			return flipRecord{}, fmt.Errorf("flip event for %s: %w", ev.Version, err)
		}
		rec.data[kind] = data
	}
	return rec, nil
}

// errWatchRefused is a watch refused for the limit or the shutdown.
var errWatchRefused = errors.New("watch refused")

// watcher is one open stream's place in the broadcaster's changes.
type watcher struct{ next uint64 }

// broadcaster looks at the pointer the Reader keeps (refreshed by the resolver's own
// loop: the broadcaster never reads storage for it) and hands every change to the
// watchers, who block on it. It runs while someone watches.
type broadcaster struct {
	reader   Reader
	interval time.Duration
	limit    int
	log      func(ctx context.Context, msg string, args ...any)

	mu       sync.Mutex
	watchers int
	stop     context.CancelFunc // ends the running loop; nil when none runs
	recent   []flipRecord       // the last flipsKept changes of the running loop, oldest first
	seq      uint64             // the newest record's seq
	changed  chan struct{}      // closed, and replaced, when a record is added
	closed   chan struct{}      // closed when the server shuts down
	isClosed bool
}

func newBroadcaster(reader Reader, interval time.Duration, limit int, log func(context.Context, string, ...any)) *broadcaster {
	return &broadcaster{reader: reader, interval: interval, limit: limit, log: log,
		changed: make(chan struct{}), closed: make(chan struct{})}
}

// join takes a watcher's slot, starting the loop for the first one. The watcher's first
// change is the newest one seen (the current version), or the first one to come. It
// returns errWatchRefused over the limit or after close.
func (b *broadcaster) join() (*watcher, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.isClosed {
		return nil, fmt.Errorf("%w: the server is shutting down", errWatchRefused)
	}
	if b.watchers >= b.limit {
		return nil, fmt.Errorf("%w: this replica serves its limit of %d watchers", errWatchRefused, b.limit)
	}
	b.watchers++
	if b.stop == nil {
		ctx, cancel := context.WithCancel(context.Background())
		b.stop, b.recent = cancel, nil
		go b.run(ctx)
	}
	w := &watcher{next: b.seq + 1}
	for i := len(b.recent) - 1; i >= 0; i-- {
		if b.recent[i].covered == nil { // the newest flip, then the coverage after it
			w.next = b.recent[i].seq
			break
		}
	}
	return w, nil
}

// leave gives a watcher's slot back, stopping the loop with the last one.
func (b *broadcaster) leave(*watcher) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.watchers--
	if b.watchers == 0 && b.stop != nil {
		b.stop()
		b.stop = nil
	}
}

// count returns the open streams.
func (b *broadcaster) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.watchers
}

// close ends every stream and refuses new ones.
func (b *broadcaster) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.isClosed {
		b.isClosed = true
		close(b.closed)
	}
}

// since returns the changes the watcher has not had yet, and a channel closed when
// there are more.
func (b *broadcaster) since(w *watcher) ([]flipRecord, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []flipRecord
	for _, r := range b.recent {
		if r.seq >= w.next {
			out = append(out, r)
		}
	}
	w.next = b.seq + 1
	return out, b.changed
}

// run looks at the pointer every interval until ctx ends, adding a record for each new
// version.
func (b *broadcaster) run(ctx context.Context) {
	t := time.NewTicker(b.interval)
	defer t.Stop()
	var last, failed snapshot.Version
	var covers string
	for {
		p, err := b.reader.Pointer(ctx)
		if err == nil && p.Version == last {
			if c := coversToken(p); c != covers {
				covers = c
				if data, err := json.Marshal(coveredEvent{Version: p.Version, Covers: c}); err == nil {
					b.add(ctx, flipRecord{event: flipEvent{Version: p.Version, Covers: c}, covered: data})
				}
			}
		}
		if err == nil && p.Version != last {
			rec, err := b.describe(ctx, p)
			switch {
			case err == nil:
				b.add(ctx, rec)
				last, failed, covers = p.Version, "", rec.event.Covers
			case ctx.Err() == nil && failed != p.Version:
				// Tried again every interval; said once.
				b.log(ctx, "watch: cannot describe the current version", "version", p.Version, "err", err)
				failed = p.Version
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// describe returns the record of a flip to the pointer p.
func (b *broadcaster) describe(ctx context.Context, p snapshot.Pointer) (flipRecord, error) {
	view, err := b.reader.View(ctx, p.Version)
	if err != nil {
		return flipRecord{}, err
	}
	return newFlipRecord(newFlipEvent(p, view.Manifest))
}

// add records a change and wakes the watchers, unless ctx (the loop's) has ended: a
// stopped loop's late result is not the running one's.
func (b *broadcaster) add(ctx context.Context, rec flipRecord) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	b.seq++
	rec.seq = b.seq
	b.recent = append(b.recent, rec)
	if n := len(b.recent); n > flipsKept {
		b.recent = append(b.recent[:0:0], b.recent[n-flipsKept:]...)
	}
	close(b.changed)
	b.changed = make(chan struct{})
}

// CloseWatches ends every GET /v1/watch stream and refuses new ones; call it when
// shutdown starts (http.Server.RegisterOnShutdown), so that the drain does not wait on
// streams that never end by themselves.
func (s *Server) CloseWatches() { s.flips.close() }

// watch answers GET /v1/watch: a Server-Sent Events stream with one "flip" event per
// change of the pointer, the current version first. An event's id is its version; a
// Last-Event-ID naming the current version skips it. With Auth the stream ends when
// the caller's token expires.
func (s *Server) watch(w http.ResponseWriter, r *http.Request) {
	release, err := s.watchers.take(s.identity(r))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer release()
	sub, err := s.flips.join()
	if err != nil {
		w.Header().Set("Retry-After", strconv.Itoa(int(watchRetry/time.Second)))
		writeProblem(w, Problem{Type: typeUnavailable, Title: "Cannot watch now", Status: http.StatusServiceUnavailable,
			Detail: err.Error() + "; retry"})
		return
	}
	defer s.flips.leave(sub)
	// The server's write timeout would end the stream: each write has a deadline of
	// its own instead (eventStream.printf).
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: pass each event on at once
	w.WriteHeader(http.StatusOK)
	st := &eventStream{w: w, rc: rc}
	st.printf("retry: %d\n\n", watchRetry.Milliseconds())
	last := lastEventID(r)
	all := s.seesAll(r)
	heartbeat := time.NewTicker(s.cfg.WatchHeartbeat)
	defer heartbeat.Stop()
	expired := s.tokenExpiry(r)
	for st.err == nil {
		recs, changed := s.flips.since(sub)
		for _, rec := range recs {
			if rec.covered != nil {
				if rec.event.Version == last {
					st.printf("event: covered\ndata: %s\n\n", rec.covered)
				}
				continue
			}
			if rec.event.Version == last {
				continue
			}
			data := rec.data[flipKind(last, rec.event)]
			if !all {
				data = s.flipFor(r, rec.event, flipKind(last, rec.event))
			}
			st.event(rec.event.Version, data)
			last = rec.event.Version
		}
		select {
		case <-changed:
		case <-heartbeat.C:
			st.printf(": ping\n\n")
		case <-r.Context().Done():
			return
		case <-s.flips.closed:
			return
		case <-expired:
			// What a caller may read was decided by its token: past the token's
			// expiry the stream ends, and a reconnection shows a fresh token.
			return
		}
	}
}

// tokenExpiry returns a channel that receives when the verifier stops accepting the
// request's token (its expiry and the leeway); nil (never) without Auth or a token
// that names no expiry.
func (s *Server) tokenExpiry(r *http.Request) <-chan time.Time {
	id := s.identity(r)
	if id == nil || id.Until().IsZero() {
		return nil
	}
	return time.After(time.Until(id.Until()))
}

// flipFor marshals a flip event for a caller that does not read every collection
// whole: only the collections it may read, without counts for those it reads through
// a scope.
func (s *Server) flipFor(r *http.Request, ev flipEvent, kind FlipKind) []byte {
	ev.Kind = kind
	names := make([]string, 0, len(ev.Collections))
	for name := range ev.Collections {
		names = append(names, name)
	}
	readable, whole, _ := s.readable(r, names)
	out := make(map[string]flipCollection, len(readable))
	for _, name := range readable {
		if whole[name] {
			out[name] = ev.Collections[name]
		} else {
			out[name] = flipCollection{Scoped: true, Held: ev.Collections[name].Held}
		}
	}
	ev.Collections = out
	data, err := json.Marshal(ev)
	if err != nil {
		return []byte("{}")
	}
	return data
}

// lastEventID returns the version a reconnecting client names, or "" when it names
// none (or something that is not a version).
func lastEventID(r *http.Request) snapshot.Version {
	v, err := snapshot.ParseVersion(r.Header.Get("Last-Event-ID"))
	if err != nil {
		return ""
	}
	return v
}

// eventStream writes a Server-Sent Events stream; after the first failed write it
// writes nothing more and err says why.
type eventStream struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error
}

func (st *eventStream) printf(format string, args ...any) {
	if st.err != nil {
		return
	}
	_ = st.rc.SetWriteDeadline(time.Now().Add(watchWriteTimeout))
	_, st.err = fmt.Fprintf(st.w, format, args...)
	st.flush()
}

// event writes a flip event: its id, the version, and its data, JSON.
func (st *eventStream) event(v snapshot.Version, data []byte) {
	st.printf("id: %s\nevent: flip\ndata: %s\n\n", v, data)
}

func (st *eventStream) flush() {
	if st.err == nil {
		if err := st.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			st.err = err
		}
	}
}
