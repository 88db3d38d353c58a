package index

import (
	"bytes"
	"unicode/utf8"
)

// The first byte of every encoded value. Each type's tags sort in the type's order;
// tagNull sorts after all of them, as NULLS LAST does.
const (
	tagNegInf    = 0x10
	tagNeg       = 0x11
	tagZero      = 0x12
	tagPos       = 0x13
	tagPosInf    = 0x14
	tagNaN       = 0x15
	tagText      = 0x20
	tagFalse     = 0x30
	tagTrue      = 0x31
	tagDate      = 0x40
	tagTimestamp = 0x41
	tagNull      = 0xFF
)

// Encode returns the order-preserving encoding of raw, a field's value as Postgres'
// to_json renders it, read as type t: JSON null is NULL, which sorts after every
// value. A value that t cannot hold is an error naming it and t.
func Encode(t Type, raw []byte) ([]byte, error) {
	return appendEncode(nil, t, raw)
}

// EncodeText returns the encoding of s, a value as typed in a filter: a number in
// decimal (or NaN, Infinity, -Infinity), text as is, true or false, a date as
// YYYY-MM-DD, a timestamp as RFC 3339 or as Postgres prints it. A timestamp without
// time zone refuses an offset (Postgres would silently drop it) and accepts a bare
// date as its midnight; a timestamptz needs an offset or Z. For every value,
// EncodeText of Postgres' text rendering equals Encode of its to_json rendering.
func EncodeText(t Type, s string) ([]byte, error) {
	var (
		dst []byte
		err error
	)
	switch t {
	case TypeNumber:
		dst, err = appendNumberText(nil, []byte(s))
	case TypeText:
		dst, err = appendText(nil, s)
	case TypeBool:
		switch s {
		case "true":
			return []byte{tagTrue}, nil
		case "false":
			return []byte{tagFalse}, nil
		}
		err = bad("want true or false")
	case TypeDate, TypeTimestamp, TypeTimestampTZ:
		dst, err = appendTime(nil, t, []byte(s))
	default:
		return nil, errInvalid("index type %d is not a type", int(t))
	}
	if err != nil {
		return nil, errInvalid("value %q is not a %s: %v", truncate(s), t, err)
	}
	return dst, nil
}

// appendEncode is Encode appending to dst.
func appendEncode(dst []byte, t Type, raw []byte) ([]byte, error) {
	var err error
	n := len(dst)
	switch {
	case string(raw) == "null":
		return append(dst, tagNull), nil
	case t == TypeNumber:
		dst, err = appendNumberJSON(dst, raw)
	case t == TypeText:
		dst, err = appendTextJSON(dst, raw)
	case t == TypeBool:
		switch string(raw) {
		case "true":
			return append(dst, tagTrue), nil
		case "false":
			return append(dst, tagFalse), nil
		}
		err = bad("want true or false")
	case t == TypeDate || t == TypeTimestamp || t == TypeTimestampTZ:
		if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
			err = bad("want a JSON string")
			break
		}
		dst, err = appendTime(dst, t, raw[1:len(raw)-1])
	default:
		return dst[:n], errInvalid("index type %d is not a type", int(t))
	}
	if err != nil {
		return dst[:n], errInvalid("value %s is not a %s: %v", truncate(string(raw)), t, err)
	}
	return dst, nil
}

// appendText appends a text value given as a Go string: the tag, its bytes, and a 0
// terminator, which sorts a prefix first, as COLLATE "C" does. Postgres text holds
// neither NUL nor invalid UTF-8, so neither needs escaping.
func appendText(dst []byte, s string) ([]byte, error) {
	if !utf8.ValidString(s) {
		return dst, bad("invalid UTF-8")
	}
	if bytes.IndexByte([]byte(s), 0) >= 0 {
		return dst, bad("text cannot hold NUL")
	}
	dst = append(dst, tagText)
	dst = append(dst, s...)
	return append(dst, 0), nil
}

// appendTextJSON appends a text value given as a JSON string, decoding its escapes.
func appendTextJSON(dst []byte, raw []byte) ([]byte, error) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return dst, bad("want a JSON string")
	}
	s := raw[1 : len(raw)-1]
	if !utf8.Valid(s) {
		return dst, bad("invalid UTF-8")
	}
	dst = append(dst, tagText)
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\\' && s[i] != '"' && s[i] >= 0x20 {
			i++
		}
		dst = append(dst, s[:i]...)
		s = s[i:]
		if len(s) == 0 {
			break
		}
		if s[0] != '\\' {
			return dst, bad("unescaped %q in a JSON string", s[0])
		}
		var (
			r   rune
			n   int
			err error
		)
		r, n, err = unescape(s)
		if err != nil {
			return dst, err
		}
		if r == 0 {
			return dst, bad("text cannot hold NUL")
		}
		dst = utf8.AppendRune(dst, r)
		s = s[n:]
	}
	return append(dst, 0), nil
}

// unescape decodes the JSON escape at the start of s, returning the rune and the
// bytes it took. A lone surrogate is an error: Postgres text cannot hold one.
func unescape(s []byte) (rune, int, error) {
	if len(s) < 2 {
		return 0, 0, bad("truncated escape")
	}
	switch s[1] {
	case '"', '\\', '/':
		return rune(s[1]), 2, nil
	case 'b':
		return '\b', 2, nil
	case 'f':
		return '\f', 2, nil
	case 'n':
		return '\n', 2, nil
	case 'r':
		return '\r', 2, nil
	case 't':
		return '\t', 2, nil
	case 'u':
		r, ok := hex4(s[2:])
		if !ok {
			return 0, 0, bad("bad \\u escape")
		}
		if r < 0xD800 || r > 0xDFFF {
			return r, 6, nil
		}
		if r < 0xDC00 && len(s) >= 12 && s[6] == '\\' && s[7] == 'u' {
			if lo, ok := hex4(s[8:]); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				return 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00), 12, nil
			}
		}
		return 0, 0, bad("lone surrogate in a \\u escape")
	}
	return 0, 0, bad("bad escape \\%c", s[1])
}

func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
