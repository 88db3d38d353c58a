package index

import (
	"bytes"
	"encoding/json"
	"math/big"
	"testing"
	"time"
)

// FuzzEncode encodes pairs of values of one type and checks what holds for every
// value: no panic; an error wraps ErrInvalid; no encoding is a proper prefix of
// another (so concatenations compare as tuples); JSON strings of the time types
// encode as their contents do through EncodeText; and two numbers, two texts or two
// timestamps compare as math/big, encoding/json's strings or time.Time do.
func FuzzEncode(f *testing.F) {
	f.Add(uint8(TypeNumber), []byte("1.10"), []byte("1.1"))
	f.Add(uint8(TypeNumber), []byte("-0.0001e-70"), []byte("-1e70"))
	f.Add(uint8(TypeText), []byte(`"a\u00e9"`), []byte(`"a\ud83d\ude00"`))
	f.Add(uint8(TypeDate), []byte(`"0044-03-15 BC"`), []byte(`"2020-01-01"`))
	f.Add(uint8(TypeTimestampTZ), []byte(`"2020-01-01T00:00:00+05:30"`), []byte(`"2019-12-31T18:30:00.5+00:00"`))
	f.Add(uint8(TypeTimestamp), []byte(`"2020-01-01T00:00:00"`), []byte(`null`))
	f.Fuzz(func(t *testing.T, ty uint8, a, b []byte) {
		typ := Type(ty%6 + 1)
		ea, erra := Encode(typ, a)
		eb, errb := Encode(typ, b)
		if erra != nil || errb != nil {
			return
		}
		if !bytes.Equal(ea, eb) && (bytes.HasPrefix(ea, eb) || bytes.HasPrefix(eb, ea)) {
			t.Fatalf("%s: %s encodes %x, %s encodes %x: one is a prefix of the other", typ, a, ea, b, eb)
		}
		if typ >= TypeDate && len(a) > 2 && a[0] == '"' {
			if et, err := EncodeText(typ, string(a[1:len(a)-1])); err != nil || !bytes.Equal(et, ea) {
				t.Fatalf("%s: EncodeText of %s = %x, %v; Encode gives %x", typ, a, et, err, ea)
			}
		}
		want, ok := compareValues(typ, a, b)
		if got := bytes.Compare(ea, eb); ok && got != want {
			t.Fatalf("%s: %s and %s compare %d; their encodings %x and %x compare %d", typ, a, b, want, ea, eb, got)
		}
	})
}

// compareValues compares two non-special values of typ independently of the
// encoding, when it can.
func compareValues(typ Type, a, b []byte) (int, bool) {
	if string(a) == "null" || string(b) == "null" || a[0] == '"' != (typ != TypeNumber) {
		return 0, false
	}
	switch typ {
	case TypeNumber:
		if bytes.ContainsAny(a, "eE") || bytes.ContainsAny(b, "eE") {
			return 0, false // big.Rat of 1e100000000 takes a long while
		}
		var ra, rb big.Rat
		if _, ok := ra.SetString(string(a)); !ok {
			return 0, false
		}
		if _, ok := rb.SetString(string(b)); !ok {
			return 0, false
		}
		return ra.Cmp(&rb), true
	case TypeText:
		var sa, sb string
		if json.Unmarshal(a, &sa) != nil || json.Unmarshal(b, &sb) != nil {
			return 0, false
		}
		return bytes.Compare([]byte(sa), []byte(sb)), true
	case TypeTimestampTZ:
		const layout = `"2006-01-02T15:04:05.999999Z07:00"`
		ta, erra := time.Parse(layout, string(a))
		tb, errb := time.Parse(layout, string(b))
		if erra != nil || errb != nil {
			return 0, false
		}
		return ta.Compare(tb), true
	}
	return 0, false
}
