package index

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/snapflip/snapflip/snapshot"
)

func TestFields(t *testing.T) {
	body := []byte(` { "a" : 1 , "b":"x,\"}","c":{"d":[1,{"e":"]}"}]},"a\u0062c":true,"n":null,"a":[2] } `)
	got, err := Fields(body, []string{"a", "b", "c", "abc", "n", "missing", "d"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"[2]", `"x,\"}"`, `{"d":[1,{"e":"]}"}]}`, "true", "null", "", ""}
	gotS := make([]string, len(got))
	for i, g := range got {
		gotS[i] = string(g)
	}
	if diff := cmp.Diff(want, gotS); diff != "" {
		t.Errorf("Fields (-want +got):\n%s", diff)
	}
	if got[5] != nil {
		t.Errorf("an absent field is %q, not nil", got[5])
	}
	for _, bad := range []string{``, `[]`, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":"x}`, `{"a":1} x`, `{"a":[1}`, `{a:1}`} {
		if _, err := Fields([]byte(bad), []string{"a"}); !errors.Is(err, snapshot.ErrInvalid) {
			t.Errorf("Fields(%s): %v; want an error wrapping ErrInvalid", bad, err)
		}
	}
}

func TestKey(t *testing.T) {
	d := NewDef([]string{"n", "t", "missing"}, []Type{TypeNumber, TypeText, TypeBool})
	got, err := Key(d, []byte(`{"t":"a\nb","x":[1,2],"n":-1.50}`))
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	for _, part := range [][]byte{mustEncode(t, TypeNumber, "-1.5"), mustEncode(t, TypeText, `"a\nb"`), {tagNull}} {
		want = append(want, part...)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("Key = %x; want %x", got, want)
	}
	if _, err := Key(d, []byte(`{"n":"12"}`)); !errors.Is(err, snapshot.ErrInvalid) {
		t.Errorf("Key of a string in a number field: %v; want ErrInvalid", err)
	}
}

func mustEncode(tb testing.TB, typ Type, raw string) []byte {
	tb.Helper()
	b, err := Encode(typ, []byte(raw))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// FuzzFields checks Fields against encoding/json on valid JSON objects: the same raw
// value, or nil, for every key.
func FuzzFields(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[1,"]"],"c":{"a":2}}`, `{"a\"":"\\","a":null}`, `{}`, ` {"\u0061" : "x" } `, `{"a":1,"a":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var m map[string]json.RawMessage
		jsonErr := json.Unmarshal(body, &m)
		names := []string{"a", "b", "c", "a\"", ""}
		for k := range m {
			names = append(names, k)
		}
		got, err := Fields(body, names)
		if jsonErr != nil || m == nil || !utf8.Valid(body) {
			return // Fields need not reject what it does not read
		}
		if err != nil {
			t.Fatalf("Fields(%s): %v; encoding/json reads it", body, err)
		}
		for i, name := range names {
			want, ok := m[name]
			if ok != (got[i] != nil) || !bytes.Equal(want, got[i]) {
				t.Errorf("Fields(%s)[%q] = %q; encoding/json has %q", body, name, got[i], want)
			}
		}
	})
}

// BenchmarkKey measures the key of a 3-field index over a 10-field document, as every
// row of every sync computes it.
func BenchmarkKey(b *testing.B) {
	body := []byte(`{"rental_id":16049,"rental_date":"2022-08-23T22:50:12.123456+00:00","inventory_id":2666,` +
		`"customer_id":393,"return_date":null,"staff_id":2,"last_update":"2022-08-23T22:50:12+00:00",` +
		`"note":"a \"quoted\" note with an escape\n","tags":["a","b",{"c":1}],"amount":12.50}`)
	d := NewDef([]string{"customer_id", "rental_date", "amount"}, []Type{TypeNumber, TypeTimestampTZ, TypeNumber})
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = AppendKey(buf[:0], d, body); err != nil {
			b.Fatal(err)
		}
	}
}

// A KeySet's keys are each index's Key, whatever the indexes share or the document
// holds.
func FuzzKeySet(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":"x","c":true}`, `{"b":null,"a":-0.5}`, `{}`, `{"a":"not a number"}`, `[]`} {
		f.Add([]byte(s))
	}
	defs := []Def{
		NewDef([]string{"a"}, []Type{TypeNumber}),
		NewDef([]string{"b", "a"}, []Type{TypeText, TypeNumber}),
		NewDef([]string{"c", "b"}, []Type{TypeBool, TypeText}),
	}
	ks := NewKeySet(defs)
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := ks.Keys(body)
		var firstErr error
		for i, d := range defs {
			want, werr := Key(d, body)
			if werr != nil {
				if firstErr == nil {
					firstErr = werr
				}
				continue
			}
			if err == nil && !bytes.Equal(got[i], want) {
				t.Fatalf("KeySet key %d of %s = %x; Key = %x", i, body, got[i], want)
			}
		}
		if (err == nil) != (firstErr == nil) {
			t.Fatalf("KeySet.Keys(%s) error %v; Key's %v", body, err, firstErr)
		}
	})
}
