package client

import (
	"context"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"
)

// Filter is one condition of a Query on a top-level field of the documents, made by
// Eq, In, Gt, Gte, Lt, Lte or IsNull.
type Filter struct {
	field, expr string
}

// String returns the condition as the API reads it: field=op.value.
func (f Filter) String() string { return f.field + "=" + f.expr }

// Eq matches documents whose field equals v.
func Eq(field string, v any) Filter { return Filter{field, "eq." + filterValue(v)} }

// Gt matches documents whose field is greater than v (never a null).
func Gt(field string, v any) Filter { return Filter{field, "gt." + filterValue(v)} }

// Gte matches documents whose field is at least v (never a null).
func Gte(field string, v any) Filter { return Filter{field, "gte." + filterValue(v)} }

// Lt matches documents whose field is less than v (never a null).
func Lt(field string, v any) Filter { return Filter{field, "lt." + filterValue(v)} }

// Lte matches documents whose field is at most v (never a null).
func Lte(field string, v any) Filter { return Filter{field, "lte." + filterValue(v)} }

// IsNull matches documents whose field is null.
func IsNull(field string) Filter { return Filter{field, "is.null"} }

// In matches documents whose field equals one of vs.
func In(field string, vs ...any) Filter {
	quoted := make([]string, len(vs))
	for i, v := range vs {
		s := filterValue(v)
		quoted[i] = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
	}
	return Filter{field, "in.(" + strings.Join(quoted, ",") + ")"}
}

// filterValue writes a value as a filter reads it: a time as RFC 3339 with its
// offset (for a timestamp without time zone, pass the text instead), a number or a
// bool as Go formats it, anything else with fmt's %v.
func filterValue(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case time.Time:
		return v.Format(time.RFC3339Nano)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case float32:
		return strconv.FormatFloat(float64(v), 'g', -1, 32)
	}
	return fmt.Sprint(v)
}

// listParams are the list route's own parameters, which no filter can name.
var listParams = map[string]bool{"limit": true, "page_token": true, "version": true, "select": true, "after": true}

// checkFilters refuses, before sending anything, a condition the API cannot read.
func checkFilters(fs []Filter) error {
	for _, f := range fs {
		switch {
		case f.field == "":
			return invalid("query: a filter on an empty field name")
		case listParams[f.field]:
			return invalid("query: cannot filter on field %q: it is a parameter of the list route", f.field)
		}
	}
	return nil
}

// Query returns the documents of a collection that match every filter, in the order
// of the index that serves them (its fields' values, then the id), page by page as
// the loop asks for them, all from one version, as List does. The filters must be
// served by one index the collection declares: equality (Eq, In, IsNull) on a prefix
// of its fields and at most one range (Gt/Gte and/or Lt/Lte) on the next; any other
// is an ErrBadRequest naming the collection's indexes.
//
//	for doc, err := range c.Query(ctx, "rental", []client.Filter{client.Eq("customer_id", 42)}, client.ListOptions{}) {
//		...
//	}
func (c *Client) Query(ctx context.Context, collection string, filters []Filter, opts ListOptions, read ...ReadOption) iter.Seq2[Document, error] {
	opts.filters = filters
	return c.query(ctx, "", collection, opts, read)
}

// Query is Client.Query on the snapshot's version.
func (s *Snapshot) Query(ctx context.Context, collection string, filters []Filter, opts ListOptions, read ...ReadOption) iter.Seq2[Document, error] {
	opts.filters = filters
	return s.c.query(ctx, s.version, collection, opts, read)
}

// query lists the documents that match opts' filters, of which there must be one or
// more.
func (c *Client) query(ctx context.Context, version, collection string, opts ListOptions, read []ReadOption) iter.Seq2[Document, error] {
	if len(opts.filters) == 0 {
		return func(yield func(Document, error) bool) {
			yield(Document{}, invalid("query: no filters (List reads every document)"))
		}
	}
	return c.list(ctx, version, collection, opts, read)
}
