package client

import (
	"net/url"
	"slices"
	"strings"
)

// ReadOption tunes a read of documents: Get, BatchGet and List, of a Client or a
// Snapshot.
type ReadOption func(*readOptions)

// readOptions are the options of one read, resolved.
type readOptions struct {
	fields []string // nil: whole documents
	set    bool     // Select was given (with no fields: an error)
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

// query adds the options to a request's query.
func (o readOptions) query(q url.Values) url.Values {
	if o.fields != nil {
		q.Set("select", strings.Join(o.fields, ","))
	}
	return q
}
