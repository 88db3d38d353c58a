package index

import (
	"bytes"
	"errors"
	"testing"

	"github.com/snapflip/snapflip/snapshot"
)

// TestEncodeOrder checks hand-picked values of each type encode in the order listed,
// with the groups on one line encoding equal.
func TestEncodeOrder(t *testing.T) {
	tests := []struct {
		typ    Type
		sorted [][]string // JSON renderings; each inner list encodes equal
	}{
		{TypeNumber, [][]string{
			{`"-Infinity"`}, {"-1e+300"}, {"-12.5", "-12.50"}, {"-1"}, {"-0.5"}, {"-1e-300"},
			{"0", "-0", "0.000", "0e10"}, {"1e-300"}, {"0.000123"}, {"0.5", "5e-1"},
			{"1", "1.0", "1.000", "10e-1"}, {"1.1", "1.10"}, {"1.10000000000000000001"}, {"1.2"},
			{"9.99"}, {"10"}, {"99"}, {"100"}, {"12345678901234567890123456789012345678"},
			{"1e+300"}, {`"Infinity"`}, {`"NaN"`}, {"null"},
		}},
		{TypeText, [][]string{
			{`""`}, {`"\u0001"`}, {`"\n"`}, {`" "`}, {`"A"`}, {`"a"`, `"\u0061"`}, {`"a\u0001"`},
			{`"ab"`}, {`"b"`}, {`"é"`, `"\u00e9"`}, {`"€"`}, {`"😀"`, `"\ud83d\ude00"`}, {"null"},
		}},
		{TypeBool, [][]string{{"false"}, {"true"}, {"null"}}},
		{TypeDate, [][]string{
			{`"-infinity"`}, {`"4714-11-24 BC"`}, {`"0044-03-15 BC"`}, {`"0001-12-31 BC"`}, {`"0001-01-01"`},
			{`"1999-12-31"`}, {`"2000-01-01"`}, {`"2020-02-29"`}, {`"10000-01-01"`}, {`"5874897-12-31"`},
			{`"infinity"`}, {"null"},
		}},
		{TypeTimestamp, [][]string{
			{`"-infinity"`}, {`"0044-03-15T12:00:00 BC"`}, {`"1999-12-31T23:59:59.999999"`},
			{`"2000-01-01T00:00:00"`}, {`"2000-01-01T00:00:00.1"`}, {`"2000-01-01T00:00:00.12"`},
			{`"294276-12-31T23:59:59.999999"`}, {`"infinity"`}, {"null"},
		}},
		{TypeTimestampTZ, [][]string{
			{`"2000-01-01T05:30:00+05:30"`, `"2000-01-01T00:00:00+00:00"`, `"1999-12-31T23:00:00-01:00"`},
			{`"2000-01-01T00:19:33+00:19:32"`}, {`"2000-01-01T00:00:01.5+00:00"`}, {`"infinity"`}, {"null"},
		}},
	}
	for _, tt := range tests {
		var prev []byte
		for i, group := range tt.sorted {
			first, err := Encode(tt.typ, []byte(group[0]))
			if err != nil {
				t.Fatalf("Encode(%s, %s): %v", tt.typ, group[0], err)
			}
			if i > 0 && bytes.Compare(prev, first) >= 0 {
				t.Errorf("%s: %s encodes %x, not after %s's %x", tt.typ, group[0], first, tt.sorted[i-1][0], prev)
			}
			for _, v := range group[1:] {
				got, err := Encode(tt.typ, []byte(v))
				if err != nil || !bytes.Equal(got, first) {
					t.Errorf("%s: %s encodes %x, %v; want %x as %s", tt.typ, v, got, err, first, group[0])
				}
			}
			prev = first
		}
	}
}

func TestEncodeRefuses(t *testing.T) {
	tests := []struct {
		typ Type
		raw string
	}{
		{TypeNumber, `"12"`}, {TypeNumber, "01"}, {TypeNumber, "1."}, {TypeNumber, ".5"}, {TypeNumber, "+1"},
		{TypeNumber, "1e"}, {TypeNumber, "1e99999999999"}, {TypeNumber, "true"}, {TypeNumber, ""},
		{TypeText, "12"}, {TypeText, `"\u0000"`}, {TypeText, `"\ud800"`}, {TypeText, "\"\xff\""}, {TypeText, `"a\"`},
		{TypeText, `"\x"`}, {TypeBool, `"true"`}, {TypeBool, "1"},
		{TypeDate, `"2020-02-30"`}, {TypeDate, `"0000-01-01"`}, {TypeDate, `"2020-01-01T00:00:00"`},
		{TypeDate, `"4714-11-23 BC"`}, {TypeDate, "20200101"}, {TypeDate, `"20-01-01"`},
		{TypeTimestamp, `"2020-01-01T00:00:00+00:00"`}, {TypeTimestamp, `"2020-01-01T24:00:01"`},
		{TypeTimestamp, `"2020-01-01T00:00:00.1234567"`}, {TypeTimestamp, `"294277-01-01T00:00:00"`},
		{TypeTimestampTZ, `"2020-01-01T00:00:00"`}, {TypeTimestampTZ, `"2020-01-01T00:00:00+16:00"`},
		{Type(0), "1"}, {Type(99), "1"},
	}
	for _, tt := range tests {
		got, err := Encode(tt.typ, []byte(tt.raw))
		if !errors.Is(err, snapshot.ErrInvalid) {
			t.Errorf("Encode(%s, %s) = %x, %v; want an error wrapping ErrInvalid", tt.typ, tt.raw, got, err)
		}
	}
}

func TestEncodeText(t *testing.T) {
	tests := []struct {
		typ        Type
		text, json string
	}{
		{TypeNumber, "1.10", "1.1"}, {TypeNumber, "+5", "5"}, {TypeNumber, ".5", "0.5"}, {TypeNumber, "5.", "5"},
		{TypeNumber, "-0", "0"}, {TypeNumber, "1E+3", "1000"}, {TypeNumber, "nan", `"NaN"`},
		{TypeNumber, "-inf", `"-Infinity"`}, {TypeNumber, "Infinity", `"Infinity"`},
		{TypeText, "a\"b\\", `"a\"b\\"`}, {TypeText, "", `""`}, {TypeText, "null", `"null"`},
		{TypeBool, "true", "true"}, {TypeDate, "2020-01-02", `"2020-01-02"`},
		{TypeDate, "0044-03-15 BC", `"0044-03-15 BC"`}, {TypeDate, "-infinity", `"-infinity"`},
		{TypeTimestamp, "2020-01-02 03:04:05.5", `"2020-01-02T03:04:05.5"`},
		{TypeTimestamp, "2020-01-02", `"2020-01-02T00:00:00"`},
		{TypeTimestamp, "2020-01-01 23:59:60", `"2020-01-02T00:00:00"`},
		{TypeTimestamp, "2020-01-01 24:00:00", `"2020-01-02T00:00:00"`},
		{TypeTimestampTZ, "2020-01-02 03:04:05+00", `"2020-01-02T03:04:05+00:00"`},
		{TypeTimestampTZ, "2020-01-02T08:34:05Z", `"2020-01-02T14:04:05+05:30"`},
		{TypeTimestampTZ, "2020-01-02t03:04:05.000001z", `"2020-01-02T03:04:05.000001+00:00"`},
		{TypeTimestampTZ, "0044-03-15 00:00:00+00:19:32 BC", `"0044-03-15T00:00:00+00:19:32 BC"`},
	}
	for _, tt := range tests {
		got, err := EncodeText(tt.typ, tt.text)
		want, werr := Encode(tt.typ, []byte(tt.json))
		if err != nil || werr != nil || !bytes.Equal(got, want) {
			t.Errorf("EncodeText(%s, %q) = %x, %v; want %x (Encode of %s, %v)", tt.typ, tt.text, got, err, want, tt.json, werr)
		}
	}
	for _, tt := range []struct {
		typ  Type
		text string
	}{
		{TypeNumber, "1,5"}, {TypeNumber, " 1"}, {TypeNumber, "0x10"}, {TypeNumber, "1_000"}, {TypeNumber, ""},
		{TypeText, "a\x00"}, {TypeText, "\xff"}, {TypeBool, "t"}, {TypeTimestamp, "2020-01-02T03:04:05Z"},
		{TypeTimestampTZ, "2020-01-02T03:04:05"}, {TypeTimestamp, "2020-01-01 23:59:60.5"}, {TypeTimestampTZ, "2020-01-02"}, {TypeDate, "2020-01-02T00:00:00"},
	} {
		if got, err := EncodeText(tt.typ, tt.text); !errors.Is(err, snapshot.ErrInvalid) {
			t.Errorf("EncodeText(%s, %q) = %x, %v; want an error wrapping ErrInvalid", tt.typ, tt.text, got, err)
		}
	}
}

func TestTypeText(t *testing.T) {
	for _, typ := range []Type{TypeNumber, TypeText, TypeBool, TypeDate, TypeTimestamp, TypeTimestampTZ} {
		b, err := typ.MarshalText()
		var got Type
		if err != nil || got.UnmarshalText(b) != nil || got != typ || string(b) != typ.String() {
			t.Errorf("%v: MarshalText %q, %v; UnmarshalText gives %v", typ, b, err, got)
		}
	}
	var got Type
	if err := got.UnmarshalText([]byte("integer")); !errors.Is(err, snapshot.ErrInvalid) {
		t.Errorf("UnmarshalText(integer) = %v; want ErrInvalid", err)
	}
	if _, err := Type(0).MarshalText(); err == nil {
		t.Error("MarshalText of the zero Type succeeded")
	}
}

func TestTypeFor(t *testing.T) {
	for name, want := range map[string]Type{
		"int2": TypeNumber, "int4": TypeNumber, "int8": TypeNumber, "numeric": TypeNumber,
		"float4": TypeNumber, "float8": TypeNumber, "text": TypeText, "varchar": TypeText, "name": TypeText,
		"uuid": TypeText, "bool": TypeBool, "date": TypeDate, "timestamp": TypeTimestamp, "timestamptz": TypeTimestampTZ,
	} {
		if got, err := TypeFor(name); got != want || err != nil {
			t.Errorf("TypeFor(%s) = %v, %v; want %v", name, got, err, want)
		}
	}
	for _, name := range []string{"bpchar", "citext", "json", "jsonb", "bytea", "_int4", "time", "interval", "money", "mytype"} {
		_, err := TypeFor(name)
		if !errors.Is(err, ErrNotIndexable) || !bytes.Contains([]byte(err.Error()), []byte(name)) {
			t.Errorf("TypeFor(%s) = %v; want ErrNotIndexable naming it", name, err)
		}
		var ne *NotIndexableError
		if !errors.As(err, &ne) || ne.Type != name || ne.Why == "" {
			t.Errorf("TypeFor(%s) = %v; want a NotIndexableError naming the type and why", name, err)
		}
	}
}
