package index

import (
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/snapflip/snapflip/snapshot"
)

// Type is how an indexed field's values compare: the Postgres type of its column,
// folded into the few orders an index knows.
type Type int

// The types an index can hold. The zero value is no type: TypeFor never returns it.
const (
	TypeNumber      Type = iota + 1 // int2, int4, int8, oid, numeric, float4, float8
	TypeText                        // text, varchar, name, uuid, enums: by bytes, as COLLATE "C"
	TypeBool                        // false < true
	TypeDate                        // date, with -infinity and infinity
	TypeTimestamp                   // timestamp without time zone
	TypeTimestampTZ                 // timestamptz, compared as the instant
)

var typeNames = [...]string{
	TypeNumber:      "number",
	TypeText:        "text",
	TypeBool:        "bool",
	TypeDate:        "date",
	TypeTimestamp:   "timestamp",
	TypeTimestampTZ: "timestamptz",
}

// ErrNotIndexable reports a field whose Postgres type no index can order as Postgres
// does. It wraps snapshot.ErrInvalid.
var ErrNotIndexable = fmt.Errorf("not indexable: %w", snapshot.ErrInvalid)

// String returns the type's name as the manifest records it: "number", "text", "bool",
// "date", "timestamp" or "timestamptz".
func (t Type) String() string {
	if t <= 0 || int(t) >= len(typeNames) {
		return fmt.Sprintf("Type(%d)", int(t))
	}
	return typeNames[t]
}

func (t Type) valid() bool { return t > 0 && int(t) < len(typeNames) }

// MarshalText returns the type's name; it refuses a type that is not one of the
// constants.
func (t Type) MarshalText() ([]byte, error) {
	if !t.valid() {
		return nil, fmt.Errorf("index type %d: %w", int(t), snapshot.ErrInvalid)
	}
	return []byte(typeNames[t]), nil
}

// UnmarshalText parses a name MarshalText returns.
func (t *Type) UnmarshalText(b []byte) error {
	for i, name := range typeNames {
		if i > 0 && name == string(b) {
			*t = Type(i)
			return nil
		}
	}
	return fmt.Errorf("index type %q: want one of number, text, bool, date, timestamp, timestamptz: %w", truncate(string(b)), snapshot.ErrInvalid)
}

// TypeFor returns the index type of a Postgres base type, given as its pg_type.typname:
// the caller resolves a domain to its base type and passes "text" for an enum (whose
// index order is its label's bytes, not its declaration order). Any other type is an
// error wrapping ErrNotIndexable that names it and says why.
func TypeFor(typname string) (Type, error) {
	switch typname {
	case "int2", "int4", "int8", "numeric", "float4", "float8":
		return TypeNumber, nil
	case "text", "varchar", "name", "uuid":
		return TypeText, nil
	case "bool":
		return TypeBool, nil
	case "date":
		return TypeDate, nil
	case "timestamp":
		return TypeTimestamp, nil
	case "timestamptz":
		return TypeTimestampTZ, nil
	}
	why, ok := notIndexable[typname]
	if !ok {
		why = "only numbers, text, varchar, name, uuid, enums, bool, date, timestamp and timestamptz can be indexed"
		if len(typname) > 0 && typname[0] == '_' {
			why = "arrays cannot be indexed"
		}
	}
	return 0, &NotIndexableError{Type: truncate(typname), Why: why}
}

// NotIndexableError is TypeFor's error: the type, and why no index orders it as
// Postgres does. It matches ErrNotIndexable.
type NotIndexableError struct {
	Type, Why string
}

func (e *NotIndexableError) Error() string {
	return fmt.Sprintf("type %s: %s: %s", e.Type, e.Why, ErrNotIndexable)
}

// Unwrap returns ErrNotIndexable.
func (e *NotIndexableError) Unwrap() error { return ErrNotIndexable }

var notIndexable = map[string]string{
	"bpchar":        "char(n) compares ignoring trailing spaces, which its JSON rendering keeps",
	"oid":           "to_json writes an oid as a string, not a number",
	"citext":        "citext compares case-insensitively, not by bytes",
	"json":          "JSON values have no order",
	"jsonb":         "JSON values are not ordered by their rendering",
	"bytea":         "bytea renders as hex text in JSON, which is not its order",
	"time":          "time of day is not indexed",
	"timetz":        "time with time zone is not indexed",
	"interval":      "intervals compare by a normalised length, not their rendering",
	"money":         "money renders with a currency format, not a number",
	"char":          `"char" is not indexed`,
	"xml":           "XML values have no order",
	"inet":          "network addresses are not indexed",
	"cidr":          "network addresses are not indexed",
	"macaddr":       "MAC addresses are not indexed",
	"bit":           "bit strings are not indexed",
	"varbit":        "bit strings are not indexed",
	"tsvector":      "text search vectors are not indexed",
	"point":         "geometric types have no total order",
	"record":        "composite values are not indexed",
	"unknown":       "the type is unknown",
	"int4range":     "ranges are not indexed",
	"tstzrange":     "ranges are not indexed",
	"daterange":     "ranges are not indexed",
	"numrange":      "ranges are not indexed",
	"int8range":     "ranges are not indexed",
	"tsrange":       "ranges are not indexed",
	"pg_lsn":        "pg_lsn is not indexed",
	"txid_snapshot": "snapshots are not indexed",
}

// errInvalid returns an error wrapping snapshot.ErrInvalid.
func errInvalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, snapshot.ErrInvalid)...)
}

// truncate shortens s for an error message, at a rune boundary.
func truncate(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	i := max
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i] + "…"
}

// bad returns an error that a caller wraps, with the value and type, into one
// wrapping snapshot.ErrInvalid.
func bad(format string, args ...any) error { return fmt.Errorf(format, args...) }

// show returns s for an error message: truncated, and quoted if it holds anything
// but printable UTF-8.
func show(s string) string {
	t := truncate(s)
	for _, r := range t {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return strconv.Quote(t)
		}
	}
	return t
}
