package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
)

// Bounds of ?select=: a longer list is refused, not cut, so that a client never gets
// fewer fields than it asked for without being told.
const (
	// maxSelectFields is the most fields one select may name.
	maxSelectFields = 100
	// maxSelectBytes is the longest select value, in bytes once percent-decoded.
	maxSelectBytes = 4 << 10
)

// selection is the set of top-level fields a read keeps (?select=a,b). The zero value
// keeps whole documents.
type selection struct {
	keep map[string]struct{}
	// tag identifies the set (not the order it was listed in), for ETags: two
	// selections that keep the same fields are the same representation.
	tag uint64
}

// whole reports whether the selection keeps whole documents (no select was given).
func (s selection) whole() bool { return s.keep == nil }

// parseSelect reads ?select= from a request: absent, whole documents; otherwise a
// comma-separated list of field names, percent-decoded once like every query value
// (so "%2C" is a comma too: a field whose name holds a comma cannot be selected). An
// empty list, an empty name ("a,,b"), a name given twice, more than maxSelectFields
// names, more than maxSelectBytes, invalid UTF-8 or NUL, or select given twice, is a
// bad request naming the input.
func parseSelect(r *http.Request) (selection, error) {
	if r.URL.RawQuery == "" {
		return selection{}, nil
	}
	values, ok := r.URL.Query()["select"]
	switch {
	case !ok:
		return selection{}, nil
	case len(values) > 1:
		return selection{}, badRequest("select: given %d times; name the fields once, separated by commas", len(values))
	}
	return newSelection(values[0])
}

// newSelection parses a select value (already percent-decoded); see parseSelect.
func newSelection(v string) (selection, error) {
	switch {
	case v == "":
		return selection{}, badRequest("select: empty; name at least one field, or leave select out for whole documents")
	case len(v) > maxSelectBytes:
		return selection{}, badRequest("select: %d bytes, over the limit of %d", len(v), maxSelectBytes)
	case !utf8.ValidString(v):
		return selection{}, badRequest("select %q: not valid UTF-8", truncate(v, 80))
	case strings.IndexByte(v, 0) >= 0:
		return selection{}, badRequest("select %q: holds a NUL byte", truncate(v, 80))
	}
	if n := strings.Count(v, ",") + 1; n > maxSelectFields {
		return selection{}, badRequest("select: %d fields, over the limit of %d", n, maxSelectFields)
	}
	keep := map[string]struct{}{}
	for i, f := range strings.Split(v, ",") {
		if f == "" {
			return selection{}, badRequest("select %q: field %d is empty", truncate(v, 80), i+1)
		}
		if _, dup := keep[f]; dup {
			return selection{}, badRequest("select %q: field %q is named twice", truncate(v, 80), truncate(f, 80))
		}
		keep[f] = struct{}{}
	}
	h := xxhash.New()
	for _, f := range slices.Sorted(maps.Keys(keep)) {
		_, _ = h.WriteString(f)
		_, _ = h.Write([]byte{0}) // never in a name: the names stay apart
	}
	return selection{keep: keep, tag: h.Sum64()}, nil
}

// apply returns body cut to the selection; body itself when it keeps whole documents.
func (s selection) apply(body []byte) ([]byte, error) {
	if s.whole() {
		return body, nil
	}
	return project(body, s.keep)
}

// etag returns the ETag of a document as the selection serves it: full, the stored
// document's; projected, a hash of the projected bytes and the selection's tag, in a
// form no stored document's ETag has ("a.b" against "a"), so that it differs from the
// whole document's and from every other selection's, and stays the same while the
// selected fields do (a 304 when only other fields changed).
func (s selection) etag(full string, projected []byte) string {
	if s.whole() {
		return full
	}
	return fmt.Sprintf(`"%016x.%016x"`, xxhash.Sum64(projected), s.tag)
}

// errNotObject is project's answer for a body that is not a JSON object.
var errNotObject = errors.New("select: the document is not a JSON object")

// project returns the members of the JSON object body whose names are in keep, in the
// document's order, each name and value byte for byte as in body; members are joined
// by "," and whitespace between them is dropped. A name the document lacks is simply
// absent; a name the document holds twice is kept twice (decoders keep the last, as
// they would of the whole document). Names are compared decoded, as encoding/json
// decodes them ("\u0061" is "a"; invalid UTF-8 is U+FFFD). body is scanned, not
// decoded: documents come from Postgres' to_json and are valid JSON, so only the
// structure is checked, and a malformed body is an error.
func project(body []byte, keep map[string]struct{}) ([]byte, error) {
	sc := scanner{b: body}
	if sc.space(); !sc.eat('{') {
		return nil, errNotObject
	}
	out := make([]byte, 1, len(body))
	out[0] = '{'
	if sc.space(); !sc.eat('}') {
		for {
			sc.space()
			nameAt := sc.i
			if !sc.str() {
				return nil, sc.errorf("a member name")
			}
			name := body[nameAt:sc.i]
			if sc.space(); !sc.eat(':') {
				return nil, sc.errorf("':'")
			}
			sc.space()
			valueAt := sc.i
			if !sc.value() {
				return nil, sc.errorf("a value")
			}
			if kept(name, keep) {
				if len(out) > 1 {
					out = append(out, ',')
				}
				out = append(append(append(out, name...), ':'), body[valueAt:sc.i]...)
			}
			if sc.space(); sc.eat('}') {
				break
			}
			if !sc.eat(',') {
				return nil, sc.errorf("',' or '}'")
			}
		}
	}
	if sc.space(); sc.i != len(body) {
		return nil, sc.errorf("the end of the document")
	}
	return append(out, '}'), nil
}

// kept reports whether the member name (a JSON string with its quotes) is selected.
func kept(name []byte, keep map[string]struct{}) bool {
	inner := name[1 : len(name)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		_, ok := keep[string(inner)] // no allocation: the compiler sees the lookup
		return ok
	}
	var s string
	if json.Unmarshal(name, &s) != nil {
		return false
	}
	_, ok := keep[s]
	return ok
}

// scanner walks JSON text just enough to find where each value ends.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) errorf(want string) error {
	return fmt.Errorf("select: malformed document: want %s at byte %d", want, s.i)
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// eat consumes c when it is next.
func (s *scanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str consumes a string, quotes included.
func (s *scanner) str() bool {
	if !s.eat('"') {
		return false
	}
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return true
		case c == '\\':
			s.i += 2
		case c < 0x20:
			return false
		default:
			s.i++
		}
	}
	return false
}

// value consumes one value: a string, an object or array (nested to any depth), or a
// number or literal.
func (s *scanner) value() bool {
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"':
		return s.str()
	case '{', '[':
		return s.container()
	}
	start := s.i
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r', ':', '"', '{', '[':
			return s.i > start
		}
		s.i++
	}
	return s.i > start
}

// container consumes an object or array by counting brackets outside strings.
func (s *scanner) container() bool {
	var stack [16]byte
	open := stack[:0] // the closers expected, innermost last
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case '"':
			if !s.str() {
				return false
			}
			continue
		case '{':
			open = append(open, '}')
		case '[':
			open = append(open, ']')
		case '}', ']':
			if len(open) == 0 || open[len(open)-1] != c {
				return false
			}
			open = open[:len(open)-1]
			if len(open) == 0 {
				s.i++
				return true
			}
		}
		s.i++
	}
	return false
}
