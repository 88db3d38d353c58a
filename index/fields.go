package index

import (
	"bytes"
	"fmt"
	"slices"
	"unicode/utf8"
)

// Fields returns the raw bytes of the values of the named top-level keys of the JSON
// object body, in the order of names: nil for a key body does not have, the last
// value for a key it repeats (as encoding/json and jsonb keep). It reads the object's
// top level only, skipping nested values by their brackets and strings; it does not
// validate what it skips, which Postgres rendered.
func Fields(body []byte, names []string) ([][]byte, error) {
	vals := make([][]byte, len(names))
	if err := scanFields(body, names, vals); err != nil {
		return nil, err
	}
	return vals, nil
}

// Key returns the encoded values component of an index entry for the document body:
// the concatenated encodings of d's fields, an absent field encoded as NULL.
func Key(d Def, body []byte) ([]byte, error) {
	return AppendKey(nil, d, body)
}

// AppendKey is Key appending to dst, so that a writer can reuse one buffer.
func AppendKey(dst []byte, d Def, body []byte) ([]byte, error) {
	if len(d.Types) != len(d.Fields) {
		return dst, errInvalid("index %s has %d fields and %d types", d.Name, len(d.Fields), len(d.Types))
	}
	var stack [16][]byte // no allocation for an index of up to 16 fields
	var vals [][]byte
	if len(d.Fields) <= len(stack) {
		vals = stack[:len(d.Fields)]
	} else {
		vals = make([][]byte, len(d.Fields))
	}
	if err := scanFields(body, d.Fields, vals); err != nil {
		return dst, err
	}
	return appendValues(dst, d, vals)
}

// appendValues appends the encodings of d's fields' raw values, nil encoded as NULL.
func appendValues(dst []byte, d Def, vals [][]byte) ([]byte, error) {
	for i, raw := range vals {
		if raw == nil {
			dst = append(dst, tagNull)
			continue
		}
		var err error
		if dst, err = appendEncode(dst, d.Types[i], raw); err != nil {
			return dst, fmt.Errorf("index %s, field %s: %w", d.Name, d.Fields[i], err)
		}
	}
	return dst, nil
}

// KeySet computes the keys of several indexes of one collection, reading each
// document's fields once for all of them.
type KeySet struct {
	defs  []Def
	names []string // every field of the indexes, once
	pos   [][]int  // pos[i][j]: where defs[i].Fields[j] is in names
}

// NewKeySet returns the KeySet of defs.
func NewKeySet(defs []Def) KeySet {
	ks := KeySet{defs: defs, pos: make([][]int, len(defs))}
	for i, d := range defs {
		for _, f := range d.Fields {
			j := slices.Index(ks.names, f)
			if j < 0 {
				j = len(ks.names)
				ks.names = append(ks.names, f)
			}
			ks.pos[i] = append(ks.pos[i], j)
		}
	}
	return ks
}

// Keys returns Key(d, body) for each of the set's indexes, in order.
func (ks KeySet) Keys(body []byte) ([][]byte, error) {
	all := make([][]byte, len(ks.names))
	if err := scanFields(body, ks.names, all); err != nil {
		return nil, err
	}
	keys := make([][]byte, len(ks.defs))
	for i, d := range ks.defs {
		if len(d.Types) != len(d.Fields) {
			return nil, errInvalid("index %s has %d fields and %d types", d.Name, len(d.Fields), len(d.Types))
		}
		vals := make([][]byte, len(d.Fields))
		for j, p := range ks.pos[i] {
			vals[j] = all[p]
		}
		var err error
		if keys[i], err = appendValues(nil, d, vals); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// scanFields fills vals[i] with the raw value of names[i] in the object body.
func scanFields(body []byte, names []string, vals [][]byte) error {
	p := skipSpace(body, 0)
	if p >= len(body) || body[p] != '{' {
		return errInvalid("document is not a JSON object")
	}
	p = skipSpace(body, p+1)
	if p < len(body) && body[p] == '}' {
		return trailing(body, p+1)
	}
	for {
		if p >= len(body) || body[p] != '"' {
			return errInvalid("document: want a key at byte %d", p)
		}
		end, escaped := skipString(body, p)
		if end < 0 {
			return errInvalid("document: unterminated key at byte %d", p)
		}
		key := body[p+1 : end-1]
		p = skipSpace(body, end)
		if p >= len(body) || body[p] != ':' {
			return errInvalid("document: want ':' at byte %d", p)
		}
		p = skipSpace(body, p+1)
		vend := skipValue(body, p)
		if vend < 0 {
			return errInvalid("document: bad value at byte %d", p)
		}
		matchKey(key, escaped, names, vals, body[p:vend])
		p = skipSpace(body, vend)
		if p < len(body) && body[p] == ',' {
			p = skipSpace(body, p+1)
			continue
		}
		if p < len(body) && body[p] == '}' {
			return trailing(body, p+1)
		}
		return errInvalid("document: want ',' or '}' at byte %d", p)
	}
}

func trailing(body []byte, p int) error {
	if skipSpace(body, p) != len(body) {
		return errInvalid("document: data after the object at byte %d", p)
	}
	return nil
}

// matchKey stores val in vals for every name equal to key (its JSON string contents).
func matchKey(key []byte, escaped bool, names []string, vals [][]byte, val []byte) {
	if escaped {
		key = unescapeKey(key)
	}
	for i, name := range names {
		if string(key) == name {
			vals[i] = val
		}
	}
}

// unescapeKey decodes a key's escapes as encoding/json does: a lone surrogate and an
// invalid byte become U+FFFD.
func unescapeKey(s []byte) []byte {
	out := make([]byte, 0, len(s))
	for len(s) > 0 {
		if s[0] != '\\' {
			r, n := utf8.DecodeRune(s)
			out = utf8.AppendRune(out, r)
			s = s[n:]
			continue
		}
		r, n, err := unescape(s)
		if err != nil {
			if len(s) >= 6 && s[1] == 'u' {
				r, n = utf8.RuneError, 6
			} else {
				r, n = utf8.RuneError, min(2, len(s))
			}
		}
		out = utf8.AppendRune(out, r)
		s = s[n:]
	}
	return out
}

func skipSpace(b []byte, p int) int {
	for p < len(b) && (b[p] == ' ' || b[p] == '\t' || b[p] == '\n' || b[p] == '\r') {
		p++
	}
	return p
}

// skipString returns the index just past the string starting at b[p] (a quote), or
// -1, and whether it holds an escape.
func skipString(b []byte, p int) (int, bool) {
	escaped := false
	for i := p + 1; ; {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return -1, escaped
		}
		q := i + j
		k := q
		for k > i && b[k-1] == '\\' {
			k--
		}
		if (q-k)%2 == 0 { // the quote is not escaped: the string ends
			return q + 1, escaped || bytes.IndexByte(b[p+1:q], '\\') >= 0
		}
		escaped, i = true, q+1
	}
}

// skipValue returns the index just past the JSON value starting at b[p], or -1.
func skipValue(b []byte, p int) int {
	if p >= len(b) {
		return -1
	}
	switch b[p] {
	case '"':
		end, _ := skipString(b, p)
		return end
	case '{', '[':
		return skipNested(b, p)
	}
	i := p
	for i < len(b) && !isDelim(b[i]) {
		i++
	}
	if i == p {
		return -1
	}
	return i
}

func isDelim(c byte) bool {
	switch c {
	case ',', '}', ']', ':', ' ', '\t', '\n', '\r', '{', '[', '"':
		return true
	}
	return false
}

// skipNested returns the index just past the object or array starting at b[p], or -1,
// counting brackets outside strings.
func skipNested(b []byte, p int) int {
	depth := 0
	for i := p; i < len(b); i++ {
		switch b[i] {
		case '"':
			end, _ := skipString(b, i)
			if end < 0 {
				return -1
			}
			i = end - 1
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}
