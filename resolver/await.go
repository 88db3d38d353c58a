package resolver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/snapflip/snapflip/snapshot"
)

// Read-your-writes waits (docs/design.md, "Reading your own writes"). A request that
// carries a token is answered from the current version once the pointer shows it
// covers the token. Waiters read nothing of their own from storage: they look at the
// pointer each refresh lands (one read however many wait) and hold no cache entry. A
// waiter whose token the pointer does not cover asks the syncer to look at the source
// now (demand), at most one raise in flight per replica and one per refresh interval,
// however many wait.

// DefaultMaxWaiters is Config.MaxWaiters' default.
const DefaultMaxWaiters = 10_000

// Await returns a view of the current version once it covers tok, waiting for the
// pointer to show one until ctx ends. It returns an error wrapping
// ErrNotCovered when the dataset is pinned at a version that does not cover tok (at
// once, or when a rollback lands while waiting); ErrTokenRejected when tok names
// another cluster than the source, or a transaction the source had not issued when
// the syncer looked after the wait began; ErrNotYetCovered when ctx ends first or
// MaxWaiters requests wait already.
func (r *Resolver) Await(ctx context.Context, tok snapshot.Token) (snapshot.View, error) {
	return r.await(ctx, tok, nil)
}

// AwaitCollection is Await for a read of collection: it returns a view of the
// first current version that covers tok for that collection too
// (Manifest.CollectionCovers), waiting on while the collection is held at a position
// that does not cover a write's token.
func (r *Resolver) AwaitCollection(ctx context.Context, tok snapshot.Token, collection string) (snapshot.View, error) {
	return r.await(ctx, tok, func(v snapshot.View) bool { return v.Manifest.CollectionCovers(collection, tok) })
}

// await is Await, and with accept, AwaitCollection: a covering version's view that
// accept refuses is waited past.
func (r *Resolver) await(ctx context.Context, tok snapshot.Token, accept func(snapshot.View) bool) (snapshot.View, error) {
	arrival := r.now()
	var refused snapshot.Version // the last version accept refused: not read again
	// Before the first version a token is waited for too: the first publish may
	// cover it.
	p, err := r.Pointer(ctx)
	switch {
	case errors.Is(err, snapshot.ErrNoVersion):
	case err != nil:
		return snapshot.View{}, err
	default:
		if p, ok, err := r.decide(ctx, p, tok, 0, arrival); ok || err != nil {
			v, err := r.covering(ctx, p, err)
			if err != nil || accept == nil || accept(v) {
				return v, err
			}
			if p.Pinned {
				return snapshot.View{}, heldPinned(p, tok)
			}
			refused = v.Version
		}
	}
	if n := r.waiting.Add(1); n > int64(r.cfg.MaxWaiters) {
		r.waiting.Add(-1)
		return snapshot.View{}, fmt.Errorf("%d requests wait for a token already: %w", r.cfg.MaxWaiters, snapshot.ErrNotYetCovered)
	}
	defer r.waiting.Add(-1)
	key := tok.String()
	if r.unhelped.allows(key, arrival) {
		r.demand.want(arrival)
	}
	tick := time.NewTicker(r.cfg.Refresh)
	defer tick.Stop()
	var need uint64
	noted := false
	for {
		landed := r.ptr.landing()
		if p, err = r.Pointer(ctx); err != nil && !errors.Is(err, snapshot.ErrNoVersion) && ctx.Err() == nil {
			return snapshot.View{}, err
		}
		if need == 0 {
			need = r.demand.after(arrival)
		}
		if err == nil {
			p, ok, jerr := r.decide(ctx, p, tok, need, arrival)
			if ok && p.Version == refused && jerr == nil {
				ok = false // covered, but not for the collection: a later version may be
			} else if ok || jerr != nil {
				if ok {
					r.unhelped.forget(key)
				}
				v, err := r.covering(ctx, p, jerr)
				if err != nil || accept == nil || accept(v) {
					return v, err
				}
				if p.Pinned {
					return snapshot.View{}, heldPinned(p, tok)
				}
				refused, ok = v.Version, false
			}
			if !noted && need > 0 && p.Covering().Demand >= need {
				// The source was looked at after this request came, and that did
				// not cover it: the transaction still runs, or the token names more
				// than any snapshot will see. Later requests with it raise demand
				// less often.
				r.unhelped.failed(key, r.now())
				noted = true
			}
		}
		select {
		case <-landed:
		case <-tick.C:
		case <-ctx.Done():
			if refused != "" {
				return snapshot.View{}, fmt.Errorf("token %s: version %s covers it, but holds the collection read at an earlier position while its new base is built: %w (%w)",
					snapshot.Truncate(tok.String(), 80), refused, snapshot.ErrNotYetCovered, ctx.Err())
			}
			return snapshot.View{}, fmt.Errorf("token %s: no version covering it was served in time: %w (%w)",
				snapshot.Truncate(tok.String(), 80), snapshot.ErrNotYetCovered, ctx.Err())
		}
	}
}

// heldPinned is the error for a token a pinned version covers but for the collection
// it holds at an earlier position: no version will come while the pin lasts.
func heldPinned(p snapshot.Pointer, tok snapshot.Token) error {
	return fmt.Errorf("the dataset is pinned at version %s, which holds the collection read at an earlier position that does not cover token %s: %w",
		p.Version, snapshot.Truncate(tok.String(), 80), snapshot.ErrNotCovered)
}

// decide judges tok against p. A refusal for a pin is confirmed against a pointer
// read after the request came, and that pointer judged instead: the replica's cached
// pointer may still show a pin that an unpin (or a newer flip) already lifted, and a
// client that is refused drops its token and may read an older version.
//
// A token that ties with p (the same position, another version: a republish made one
// from the other) is confirmed the same way: the client read the token's version
// before it sent the request, so a pointer read after the request came names that
// version or a later one.
func (r *Resolver) decide(ctx context.Context, p snapshot.Pointer, tok snapshot.Token, need uint64, arrival time.Time) (snapshot.Pointer, bool, error) {
	ok, err := judge(p, tok, need)
	switch {
	case ok && !ties(p, tok):
		return p, true, nil
	case !ok && !errors.Is(err, snapshot.ErrNotCovered):
		return p, ok, err
	}
	fresh, ferr := r.ptr.since(ctx, arrival)
	if ferr != nil {
		return p, false, err
	}
	ok, err = judge(fresh, tok, need)
	return fresh, ok, err
}

// covering returns the view of p's version, which covers the token, or err. The
// view is read within the resolver's own timeout, not the wait's: a covered token
// is answered however short a wait the request asked for.
func (r *Resolver) covering(ctx context.Context, p snapshot.Pointer, err error) (snapshot.View, error) {
	if err != nil {
		return snapshot.View{}, err
	}
	vctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Timeout)
	defer cancel()
	v, err := r.View(vctx, p.Version)
	if errors.Is(err, snapshot.ErrGone) {
		return snapshot.View{}, fmt.Errorf("%w: %v", snapshot.ErrCurrentExpired, err)
	}
	return v, err
}

// Waiting returns how many requests wait for a token now.
func (r *Resolver) Waiting() int64 { return r.waiting.Load() }

// judge decides a token against a pointer: covered, or an error that ends the wait
// (wrapping ErrTokenRejected or ErrNotCovered), or neither (wait on). need is the
// demand raised after the wait began (0 until one is): a coverage recorded at or
// after it was read from a snapshot taken after the request came.
func judge(p snapshot.Pointer, tok snapshot.Token, need uint64) (bool, error) {
	if err := tok.CheckSystem(p.Source.System); err != nil {
		return false, err
	}
	cov := p.Covering()
	sn, err := cov.PGSnapshot()
	if err == nil {
		if nerr := sn.NarrowError(tok); nerr != nil {
			return false, nerr
		}
		if sn.Covers(tok) {
			return true, nil
		}
	}
	// The version's own snapshot too: a token cut to MaxTokenBytes from it claims
	// that the transactions it dropped ended, which a later coverage may refute while
	// one of them still runs.
	if own, oerr := p.Source.PGSnapshot(); oerr == nil && cov.PgSnapshot != p.Source.PgSnapshot && own.Covers(tok) {
		return true, nil
	}
	switch {
	case p.Pinned:
		return false, fmt.Errorf("the dataset is pinned at version %s, which does not cover token %s: %w",
			p.Version, snapshot.Truncate(tok.String(), 80), snapshot.ErrNotCovered)
	case err == nil && need > 0 && cov.Demand >= need && sn.Future(tok):
		return false, fmt.Errorf("%w: %w: token %s names a transaction the source had not started when the syncer looked (its snapshot was %s)",
			snapshot.ErrInvalid, snapshot.ErrTokenRejected, snapshot.Truncate(tok.String(), 80), snapshot.Truncate(cov.PgSnapshot, 80))
	}
	return false, nil
}

// ties reports whether tok, which p covers, names another version read at the very
// position p's version is known to hold.
func ties(p snapshot.Pointer, tok snapshot.Token) bool {
	if tok.Version == "" || tok.Version == p.Version {
		return false
	}
	for _, sn := range []func() (snapshot.PGSnapshot, error){p.Covering().PGSnapshot, p.Source.PGSnapshot} {
		if s, err := sn(); err == nil && s.Ties(tok, p.Version) {
			return true
		}
	}
	return false
}

// CoversNamed reports whether version v (one a request named) covers tok: by its
// own snapshot, or, when the pointer names it, by the coverage recorded for it. It
// returns nil when it does, else an error wrapping ErrNotCovered or ErrTokenRejected.
func (r *Resolver) CoversNamed(ctx context.Context, view snapshot.View, tok snapshot.Token) error {
	if err := tok.CheckSystem(view.Manifest.Source.System); err != nil {
		return err
	}
	if sn, err := view.Manifest.Source.PGSnapshot(); err == nil {
		if nerr := sn.NarrowError(tok); nerr != nil {
			return nerr
		}
		if sn.Covers(tok) {
			return nil
		}
	}
	if p, err := r.Pointer(ctx); err == nil && p.Version == view.Version {
		if ok, _ := judge(p, tok, 0); ok {
			return nil
		}
	}
	return fmt.Errorf("version %s does not cover token %s: %w", view.Version, snapshot.Truncate(tok.String(), 80), snapshot.ErrNotCovered)
}

// unhelped remembers tokens that a look at the source on demand did not cover (an
// open transaction's, a session token cut to fit whose dropped transaction still
// runs, a transaction id never issued where the source cannot say so), so that
// requests sending them again do not make the syncer look at every row once a
// refresh: after n looks that did not help, a token raises demand again only
// unhelpedBase·2^(n-1) later, at most unhelpedMax. Its waiters still wait, for the
// scheduled syncs and for the raises of other tokens.
type unhelped struct {
	mu     sync.Mutex
	tokens *lru.Cache[string, unhelpedToken]
}

type unhelpedToken struct {
	fails int
	until time.Time // no raise for it before
}

// unhelpedBase and unhelpedMax bound a token's back-off; maxUnhelped bounds how many
// tokens are remembered.
const (
	unhelpedBase = time.Second
	unhelpedMax  = time.Minute
	maxUnhelped  = 10_000
)

func newUnhelped() *unhelped {
	c, _ := lru.New[string, unhelpedToken](maxUnhelped)
	return &unhelped{tokens: c}
}

// allows reports whether a request with the token, come at arrival, may raise demand.
func (u *unhelped) allows(key string, arrival time.Time) bool {
	t, ok := u.tokens.Get(key)
	return !ok || !arrival.Before(t.until)
}

// failed records a look on demand that did not cover the token.
func (u *unhelped) failed(key string, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	t, _ := u.tokens.Get(key)
	if now.Before(t.until) {
		return // a look already counted for requests that came before it
	}
	t.fails++
	t.until = now.Add(min(unhelpedBase<<min(t.fails-1, 16), unhelpedMax))
	u.tokens.Add(key, t)
}

// forget drops a token once covered.
func (u *unhelped) forget(key string) {
	if u.tokens.Contains(key) {
		u.tokens.Remove(key)
	}
}

// demander raises the dataset's demand for waiters: one raise in flight at a time, at
// most one per gap, and only while a waiter came after the last raise was sent.
type demander struct {
	raise func(ctx context.Context) (uint64, error) // nil: demand is off
	gap   time.Duration
	now   func() time.Time
	base  func() context.Context
	// waiting says how many requests wait: with none, nothing is raised.
	waiting func() int64

	mu      sync.Mutex
	sentAt  time.Time // when the last raise that succeeded was sent
	seq     uint64    // the counter it returned
	wanted  time.Time // the latest arrival no raise was sent after yet; zero for none
	flight  bool      // a raise is in flight, or one is scheduled
	lastTry time.Time // when the last raise was sent, whatever its outcome
}

// want asks for a raise sent at or after arrival.
func (d *demander) want(arrival time.Time) {
	if d.raise == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.sentAt.Before(arrival) && !d.sentAt.IsZero() {
		return
	}
	if arrival.After(d.wanted) {
		d.wanted = arrival
	}
	d.kick()
}

// kick sends a raise now, or schedules one at the end of the gap, unless one is in
// flight (its end kicks again). Callers hold mu.
func (d *demander) kick() {
	if d.waiting() == 0 {
		d.wanted = time.Time{} // every waiter left: nothing stays behind
	}
	if d.flight || d.wanted.IsZero() {
		return
	}
	d.flight = true
	wait := d.gap - d.now().Sub(d.lastTry)
	if wait > 0 {
		time.AfterFunc(wait, d.send)
		return
	}
	go d.send()
}

// send raises the demand once, and kicks again for waiters that came meanwhile.
func (d *demander) send() {
	d.mu.Lock()
	sent := d.now()
	d.lastTry = sent
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(d.base(), d.gap+5*time.Second)
	seq, err := d.raise(ctx)
	cancel()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.flight = false
	if err == nil {
		d.sentAt, d.seq = sent, seq
		if !d.wanted.After(sent) {
			d.wanted = time.Time{}
		}
	}
	if d.base().Err() == nil {
		d.kick()
	}
}

// after returns the counter a raise sent at or after arrival returned, or 0 before
// one has.
func (d *demander) after(arrival time.Time) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sentAt.IsZero() || d.sentAt.Before(arrival) {
		return 0
	}
	return d.seq
}
