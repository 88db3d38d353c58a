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
// returns a handle that reads only that one.
func (c *Client) Snapshot(ctx context.Context) (*Snapshot, error) {
	p, err := c.current(ctx)
	if err != nil {
		return nil, err
	}
	return &Snapshot{c: c, version: p.Version.String()}, nil
}

// pointer is what the API says of the current version: the version, and when the
// pointer last moved.
type pointer struct {
	Version   versionID `json:"version"`
	FlippedAt time.Time `json:"flipped_at"`
}

// current asks the API for the current pointer.
func (c *Client) current(ctx context.Context) (pointer, error) {
	const path = "/v1/versions/current"
	a, err := c.send(ctx, request{method: http.MethodGet, path: path})
	if err != nil {
		return pointer{}, err
	}
	var p pointer
	if err := json.Unmarshal(a.body, &p); err != nil {
		return pointer{}, fmt.Errorf("snapflip: GET %s: decode the answer: %w", path, err)
	}
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
