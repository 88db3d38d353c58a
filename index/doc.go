// Package index computes what an index of a version holds and how a filter reads it,
// without storage: the types an indexed field can have, the encoding of its values,
// the values of a document's fields, PostgREST-style filter conditions, the plan
// that turns conditions into ranges of one index's entries, and the blocks a base
// packs its entries in, with their directory (block.go).
//
// # Encoding
//
// An index entry's values component is the concatenation of its fields' encodings.
// Each encoding is self-delimiting (no encoding is a prefix of another of the same
// type), so comparing two concatenations byte by byte compares them as tuples, field
// by field, and a suffix such as the entry's id never changes how the component
// compares with a range bound. For each type, bytes.Compare of two encodings agrees
// with Postgres' comparison of the values (=, <, >) with NULLS LAST:
//
//   - NULL, of any type, is the single byte 0xFF, after every value.
//   - number: a tag for -Infinity, negative, zero, positive, Infinity and NaN (in
//     that order, as Postgres orders numeric and float8); a positive number is then
//     its decimal exponent E (one byte for -64..63, else a marker and four bytes) and
//     its significant digits d1…dn for 0.d1…dn × 10^E, two digits v to a byte, 2v+1
//     but the last 2v, so that 1.1 and 1.10 encode equal, precision is unbounded, and
//     a longer run of digits sorts after its prefix; a negative number is the bytes of
//     its absolute value complemented.
//   - text: a tag, the UTF-8 bytes, and a 0 byte (Postgres text holds no NUL), which
//     orders as COLLATE "C".
//   - bool: one byte, false before true.
//   - date: a tag and the days since 2000-01-01 as a big-endian int32 with its sign bit
//     flipped; -infinity and infinity are the int32 extremes, as in Postgres.
//   - timestamp and timestamptz: a tag and the microseconds since 2000-01-01 (for
//     timestamptz, of the instant in UTC, whatever offset it was written with) as a
//     big-endian int64 with its sign bit flipped; the infinities are the extremes.
//
// Encode reads a value as to_json renders it; EncodeText reads it as a filter or
// Postgres' text output writes it; both give the same bytes for the same value.
//
// # Ranges
//
// Plan turns a filter into ranges of encoded values components: equality on the
// first fields of an index makes prefixes (one per combination of in values), and a
// range on the next field bounds what follows them. A range never reaches the NULL
// byte unless is.null asks for it, so gt, gte, lt and lte never match NULL.
//
// # Errors
//
// Every refusal of input (a value its type cannot hold, a malformed filter, a type
// no index can order, a filter no index serves) wraps snapshot.ErrInvalid and names
// the input; ErrNotIndexable and ErrNoIndex single out the last two.
package index
