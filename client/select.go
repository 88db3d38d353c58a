package client

import (
	"net/url"
	"slices"
	"strings"
)

// ReadOption tunes a read of documents: Get, BatchGet, List and Query, of a Client or
// a Snapshot.
type ReadOption func(*readOptions)

// readOptions are the options of one read, resolved.
type readOptions struct {
	fields []string // nil: whole documents
	set    bool     // Select was given (with no fields: an error)
	after  *string  // After's token; nil: none given
}

// After asks that the read be answered from a version that covers a read-your-writes
// token, so that it sees a write: "x:" || pg_current_xact_id() taken in the writing
// transaction, or "s:" || pg_current_snapshot() taken after its commit (package
// pgtoken makes both), or a Snapshot-Token an answer named. The API waits for such a
// version up to 5s, or less when the context's deadline is sooner; past that the read
// fails with ErrNotYetCovered. A Snapshot's read fails with ErrNotCovered when the
// snapshot's version does not cover the token, as does any read while an operator has
// pinned the dataset at a version that does not. A token that does not parse (the
// empty one included) fails the read with ErrTokenRejected, without sending anything;
// the API says the same of a token of another cluster, or of a transaction it never
// saw started. For this read, it replaces the token a Client sends of its own accord
// (see Config.NoSessionToken); of several After, the last counts.
func After(token string) ReadOption {
	return func(o *readOptions) { o.after = &token }
}

// Select keeps only the named top-level fields of each document read (the API's
// ?select=): a Document's JSON holds the selected fields it has, in the document's own
// order, each value byte for byte as stored; a field it lacks is absent. The ETag Get
// returns is the selection's own, and the ETag cache keeps a selection apart from the
// whole document. A name given twice is asked for once. No names, an empty name, or a
// name containing a comma (which the API's list cannot carry) fails the read with an
// error matching ErrBadRequest, as do more than 100 names (the API's limit).
func Select(fields ...string) ReadOption {
	return func(o *readOptions) {
		o.set = true
		for _, f := range fields {
			if !slices.Contains(o.fields, f) {
				o.fields = append(o.fields, f)
			}
		}
	}
}

// resolve applies opts; what the API would refuse and the client can tell is an
// error matching ErrBadRequest.
func resolve(op string, opts []ReadOption) (readOptions, error) {
	var o readOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.after != nil {
		if _, err := parseToken(*o.after); err != nil {
			return o, rejected(op+": After", err)
		}
	}
	if !o.set {
		return o, nil
	}
	if len(o.fields) == 0 {
		return o, invalid("%s: Select names no field", op)
	}
	for _, f := range o.fields {
		if f == "" || strings.Contains(f, ",") {
			return o, invalid("%s: Select(%q): a field name must be non-empty and hold no comma", op, truncate(f, 80))
		}
	}
	return o, nil
}

// consistency is what a request of the read sends as Snapshot-After: the caller's
// token, else the last one answered when the request names no version (a Snapshot's version is
// its caller's choice; a later page or part names the version the first one read).
func (o readOptions) consistency(version string) consistency {
	if o.after != nil {
		return consistency{after: *o.after}
	}
	return consistency{monotonic: version == ""}
}

// query adds the options to a request's query.
func (o readOptions) query(q url.Values) url.Values {
	if o.fields != nil {
		q.Set("select", strings.Join(o.fields, ","))
	}
	return q
}
