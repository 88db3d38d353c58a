package client

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"time"
)

// Snapshot reads one version of the dataset, whatever the pointer does after it was
// taken: every read names the version (query parameter "version"), so a flip between
// two calls changes nothing for it. A version lives until its TTL runs out once it is
// no longer current; past that, reads fail with ErrGone and the caller takes a new
// Snapshot. A Snapshot is safe for concurrent use.
type Snapshot struct {
	c       *Client
	version string
}

// Snapshot pins the current version: it asks the API which version is current and
// returns a handle that reads only that one, no older than the newest token the
// client was answered with (see SessionToken).
func (c *Client) Snapshot(ctx context.Context) (*Snapshot, error) {
	return c.snapshot(ctx, consistency{monotonic: true})
}

// SnapshotAfter pins the current version once it covers a read-your-writes token, as
// a read with After(token) would be answered, and fails as such a read fails
// (ErrNotYetCovered, ErrNotCovered, ErrTokenRejected): every read of the handle sees
// the write the token names.
func (c *Client) SnapshotAfter(ctx context.Context, token string) (*Snapshot, error) {
	if _, err := parseToken(token); err != nil {
		return nil, rejected("snapshot", err)
	}
	return c.snapshot(ctx, consistency{after: token})
}

func (c *Client) snapshot(ctx context.Context, cons consistency) (*Snapshot, error) {
	p, err := c.current(ctx, cons)
	if err != nil {
		return nil, err
	}
	return &Snapshot{c: c, version: p.Version.String()}, nil
}

// pointer is what the API says of the current version: the version, when the pointer
// last moved, whether it is pinned, and the tokens the version covers. A flip event
// and a covered event of the flip stream say the same, the latter of the version and
// its covers alone.
type pointer struct {
	Version   versionID `json:"version"`
	FlippedAt time.Time `json:"flipped_at"`
	Pinned    bool      `json:"pinned"`
	// Token is the "s:" token of the snapshot the version was read at; Covers, the
	// newest snapshot's the version is known to hold everything of (at least Token).
	// Both are "" from an API that names no tokens. Token is named "snapshot_token"
	// in the current version's JSON ("token" there is the publish lease's fence) and
	// "token" in a flip event's: each decodes it apart.
	Token  string `json:"-"`
	Covers string `json:"covers"`
	// Held names, per held collection of the version, the token of the earlier
	// position it reflects while its new base is built (nil: none held).
	Held map[string]string `json:"held,omitempty"`
}

// coverage returns the newest snapshot token the version is known to cover; "" for
// none.
func (p pointer) coverage() string {
	if p.Covers == "" {
		return p.Token
	}
	return newer(p.Token, p.Covers)
}

// current asks the API for the current pointer, sending the token cons says.
func (c *Client) current(ctx context.Context, cons consistency) (pointer, error) {
	const path = "/v1/versions/current"
	a, err := c.send(ctx, request{method: http.MethodGet, path: path, consistency: cons})
	if err != nil {
		return pointer{}, err
	}
	var body struct {
		pointer
		SnapshotToken string `json:"snapshot_token"`
	}
	if err := json.Unmarshal(a.body, &body); err != nil {
		return pointer{}, fmt.Errorf("snapflip: GET %s: decode the answer: %w", path, err)
	}
	p := body.pointer
	p.Token = body.SnapshotToken
	if !versionPattern.MatchString(p.Version.String()) {
		return pointer{}, fmt.Errorf("snapflip: GET %s: the answer names no version (%q)", path, truncate(p.Version.String(), 80))
	}
	return p, nil
}

// Pin returns a handle that reads the given version (as a response's Snapshot-Version
// or Document.Version names it), without asking the API anything: a version that does
// not exist or has expired fails each read with ErrGone. A string that is not a
// version is an error matching ErrBadRequest.
func (c *Client) Pin(version string) (*Snapshot, error) {
	if !versionPattern.MatchString(version) {
		return nil, invalid("pin %q: not a version (want <uuid>-<unix-millis>)", truncate(version, 80))
	}
	return &Snapshot{c: c, version: version}, nil
}

// Version returns the version the handle reads.
func (s *Snapshot) Version() string { return s.version }

// Get reads one document of the handle's version; see Client.Get.
func (s *Snapshot) Get(ctx context.Context, collection, id string, opts ...ReadOption) (Document, error) {
	return s.c.get(ctx, s.version, collection, id, opts)
}

// BatchGet reads many documents of the handle's version; see Client.BatchGet. The
// version it returns is always the handle's.
func (s *Snapshot) BatchGet(ctx context.Context, collection string, ids []string, opts ...ReadOption) (docs map[string]Document, missing []string, version string, err error) {
	return s.c.batchGet(ctx, s.version, collection, ids, opts)
}

// List returns the documents of a collection in the handle's version; see Client.List.
func (s *Snapshot) List(ctx context.Context, collection string, opts ListOptions, read ...ReadOption) iter.Seq2[Document, error] {
	return s.c.list(ctx, s.version, collection, opts, read)
}
