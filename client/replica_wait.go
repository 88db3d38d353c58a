package client

import (
	"context"
	"errors"
	"fmt"
)

// A replica knows what the versions it holds cover from the flip stream: each flip
// names the version's own snapshot token and the newest snapshot the version is known
// to cover (covers), and a covered event says the current version covers a newer
// snapshot still, when a sync found nothing to publish. WaitFor decides from these
// alone, without asking the API.

// errReplicaClosed is WaitFor's error once the replica stopped following.
var errReplicaClosed = errors.New("snapflip: replica: closed")

// WaitFor returns a View of a version that covers a read-your-writes token (see
// After): at once when the version held does, else as soon as the replica swaps one
// in, or learns that the version held covers it (a sync that found nothing new to
// publish proves so). It holds no version while it waits.
//
// It fails with an error matching ErrPinned (and ErrNotCovered) when an operator has
// pinned the dataset at a version that does not cover the token, matching
// ErrTokenRejected (and ErrBadRequest) for a token that does not parse or names
// another cluster than the versions', and with the context's error when ctx ends
// first, which bounds the wait: a transaction's token is not covered while the
// transaction is in progress, and none is by an API that names no tokens. It fails too
// once the replica is closed.
func (r *Replica) WaitFor(ctx context.Context, token string) (View, error) {
	want, err := parseToken(token)
	if err != nil {
		return View{}, rejected("replica: wait for", err)
	}
	for {
		w := r.await(want)
		switch w.outcome {
		case waitCovered:
			return w.view, nil
		case waitPinned:
			return View{}, fmt.Errorf("snapflip: replica: wait for %s: the dataset is pinned at version %s: %w: %w",
				truncate(token, 80), w.newest, ErrPinned, ErrNotCovered)
		case waitForeign:
			return View{}, rejected("replica: wait for", fmt.Errorf("token %s names another cluster than the dataset's", truncate(token, 80)))
		case waitNarrow:
			return View{}, rejected("replica: wait for", fmt.Errorf("token %s names a 32-bit transaction id, but the source's ids are past 2^32: make x: tokens with pg_current_xact_id()", truncate(token, 80)))
		}
		select {
		case <-w.changed:
		case <-r.done:
			return View{}, errReplicaClosed
		case <-ctx.Done():
			return View{}, fmt.Errorf("snapflip: replica: wait for %s: %w", truncate(token, 80), context.Cause(ctx))
		}
	}
}

// waiting is what WaitFor makes of what a replica knows at one moment.
type waiting struct {
	outcome waitOutcome
	view    View            // the version held, when it covers the token; else none, so that nothing is held while waiting
	newest  string          // the newest version seen
	changed <-chan struct{} // closed when what the replica knows changes
}

// await says what WaitFor makes of what the replica knows now.
func (r *Replica) await(want token) waiting {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state.Load()
	held := ""
	if st != nil {
		held = st.covers
		if st.version == r.newest.Version.String() {
			held = newer(held, r.newest.coverage())
		}
	}
	w := waiting{outcome: awaitToken(want, held, r.newest), newest: r.newest.Version.String(), changed: r.changed}
	if w.outcome == waitCovered && !heldCover(st, want) {
		w.outcome = waitMore // a held collection does not hold the write yet
	}
	if w.outcome == waitCovered {
		w.view = View{st}
	}
	return w
}

// heldCover reports whether every collection st holds at an earlier position
// covers want, when want is a write's token (one that names no version): the
// token of an earlier answer asks for monotonic reads alone, which a held
// collection keeps.
func heldCover(st *replicaState, want token) bool {
	if st == nil || want.version != "" {
		return true
	}
	for _, tok := range st.held {
		c, err := parseToken(tok)
		if err != nil || !c.covers(want) {
			return false
		}
	}
	return true
}

// waitOutcome is what a replica's WaitFor makes of a token.
type waitOutcome int

const (
	// waitMore: no version the replica holds or knows of covers the token yet.
	waitMore waitOutcome = iota
	// waitCovered: the version held covers the token.
	waitCovered
	// waitPinned: the dataset is pinned at the newest version, which does not cover
	// the token.
	waitPinned
	// waitForeign: the token names another cluster than the versions'.
	waitForeign
	// waitNarrow: the token names a 32-bit transaction id of a source whose ids are
	// past 2^32.
	waitNarrow
)

// awaitToken decides WaitFor: held is the newest snapshot token the version held is
// known to cover ("" for none, or nothing held), newest the newest pointer seen.
func awaitToken(want token, held string, newest pointer) waitOutcome {
	if c, err := parseToken(held); err == nil {
		switch {
		case c.foreign(want):
			return waitForeign
		case c.narrow(want):
			return waitNarrow
		case c.covers(want) && !tiedWithNewer(want, c, newest):
			return waitCovered
		}
	}
	if c, err := parseToken(newest.coverage()); err == nil {
		switch {
		case c.foreign(want):
			return waitForeign
		case c.narrow(want):
			return waitNarrow
		case newest.Pinned && !c.covers(want):
			return waitPinned
		}
	}
	return waitMore
}

// tiedWithNewer reports whether want, which held covers, names the newest version
// the replica knows of, read at the same position as the version held (a republish
// that added a collection): the replica is swapping that version in.
func tiedWithNewer(want, held token, newest pointer) bool {
	return want.version != "" && want.version != held.version && want.version == newest.Version.String() && want.covers(held)
}

// covered records a covered event: the newest version, if p names it, covers p.Covers.
func (r *Replica) covered(p pointer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cover(p)
}

// cover keeps what p says its version covers when it is the newest pointer's
// version, whatever else it says: a version's contents never change, so what it covers
// never shrinks. Under mu.
func (r *Replica) cover(p pointer) {
	if p.Version != r.newest.Version {
		return
	}
	was := r.newest.coverage()
	if now := newer(was, p.coverage()); now != was {
		r.newest.Covers = now
		r.signal()
	}
}

// signal wakes every WaitFor: the version held, or what the newest covers, changed.
// Under mu.
func (r *Replica) signal() {
	close(r.changed)
	r.changed = make(chan struct{})
}
