package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/snapflip/snapflip/snapshot"
)

// Held collections (docs/design.md, "Held collections"): a collection whose
// definition changed is served at its last state before the change while its new
// base is built beside the stream of versions. An answer from it says so, and a
// write's token it does not cover is never answered from it.

// HeaderHeld, on an answer from a held collection, names the position the
// collection reflects, as a token that names no version: earlier than the
// version's own (Snapshot-Token).
const HeaderHeld = "Snapshot-Held"

// errHeld marks an error about a held collection, for its problem's detail.
var errHeld = errors.New("the collection is held")

// CollectionAwaiter is a Reader that can wait for a version that covers a token for
// one collection (a held collection covers less than its version); without it, a
// read whose token its collection's held position does not cover fails at once as
// not yet covered.
type CollectionAwaiter interface {
	AwaitCollection(ctx context.Context, tok snapshot.Token, collection string) (snapshot.View, error)
}

// viewFor is view for a read of collection: with a write's token (one that names no
// version), the collection itself must cover it (Manifest.CollectionCovers); the
// current version is waited past while it holds the collection at a position that
// does not, and a version the request named fails as not covering it.
func (s *Server) viewFor(r *http.Request, collection string) (snapshot.View, bool, error) {
	view, pinned, err := s.view(r)
	if err != nil {
		return view, pinned, err
	}
	tok, has, _ := afterToken(r) // view parsed it
	if !has || view.Manifest.CollectionCovers(collection, tok) {
		return view, pinned, nil
	}
	held := view.Manifest.Collections[collection].Held
	if pinned {
		return view, true, fmt.Errorf("version %s holds collection %s at an earlier position (%s), which does not cover token %s: %w (%w)",
			view.Version, collection, held.Why, snapshot.Truncate(tok.String(), 80), snapshot.ErrNotCovered, errHeld)
	}
	a, ok := s.reader.(CollectionAwaiter)
	if !ok {
		return view, false, fmt.Errorf("version %s holds collection %s at an earlier position, which does not cover token %s: %w",
			view.Version, collection, snapshot.Truncate(tok.String(), 80), snapshot.ErrNotYetCovered)
	}
	release, err := s.waiters.take(s.identity(r))
	if err != nil {
		return snapshot.View{}, false, err
	}
	defer release()
	ctx, cancel := context.WithTimeout(r.Context(), waitBound(r))
	defer cancel()
	view, err = a.AwaitCollection(ctx, tok, collection)
	return view, false, err
}

// stampFor stamps an answer from collection in view (stamp), and names the
// position a held collection reflects (HeaderHeld).
func (s *Server) stampFor(w http.ResponseWriter, view snapshot.View, collection string) {
	s.stamp(w, view)
	if h := view.Manifest.Collections[collection].Held; h != nil {
		if tok := h.Source.Token(""); tok != "" {
			w.Header()[HeaderHeld] = []string{tok}
		}
	}
}

// HeldInfo says where a held collection stands, in /v1/collections and the flip
// stream.
type HeldInfo struct {
	// Token names the position the collection reflects (as Snapshot-Held does).
	Token string    `json:"token"`
	Why   string    `json:"why"`
	Since time.Time `json:"since"`
}

// heldInfo describes a collection's hold; nil for one not held.
func heldInfo(c snapshot.CollectionStats) *HeldInfo {
	if c.Held == nil {
		return nil
	}
	return &HeldInfo{Token: c.Held.Source.Token(""), Why: c.Held.Why, Since: c.Held.Since}
}
