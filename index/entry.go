package index

import (
	"errors"
	"fmt"
	"strings"

	"github.com/snapflip/snapflip/snapshot"
)

// Collection names where the entries of a collection's index are stored
// (snapshot.IndexCollection).
func Collection(collection, index string) string { return snapshot.IndexCollection(collection, index) }

// EntryBody is the body of a live entry; a tombstone's is empty, as a document's.
var EntryBody = []byte{'1'}

// EntryID is the id of the entry of the document id whose values component is key:
// the key escaped so that it holds no 0x00 (0x00 → 0x01 0x01, 0x01 → 0x01 0x02), a
// 0x00, and the id. Escaping keeps order and 0x00 sorts below every escaped byte, so
// entries sort by key, then by id, and EntrySpan's bounds, escaped alike, bound them
// exactly as a Range bounds keys.
func EntryID(key []byte, id string) string {
	var b strings.Builder
	b.Grow(len(key) + 2 + len(id))
	escapeKey(&b, key)
	b.WriteByte(0)
	b.WriteString(id)
	return b.String()
}

// escapeKey writes key without 0x00 bytes, keeping byte order.
func escapeKey(b *strings.Builder, key []byte) {
	for _, c := range key {
		if c <= 1 {
			b.WriteByte(1)
			c++
		}
		b.WriteByte(c)
	}
}

// ErrEntry reports an entry id EntryID did not make.
var ErrEntry = errors.New("malformed index entry")

// ParseEntryID returns the values component and the document id of an entry id.
func ParseEntryID(e string) (key []byte, id string, err error) {
	for i := 0; i < len(e); i++ {
		switch c := e[i]; {
		case c == 0:
			return key, e[i+1:], nil
		case c == 1 && i+1 < len(e) && (e[i+1] == 1 || e[i+1] == 2):
			key = append(key, e[i+1]-1)
			i++
		case c == 1:
			return nil, "", ErrEntry
		default:
			key = append(key, c)
		}
	}
	return nil, "", ErrEntry
}

// EntrySpan returns the entry ids whose values component is in r.
func EntrySpan(r Range) snapshot.Span {
	span := snapshot.Span{From: escaped(r.Start), Inclusive: true}
	if r.End != nil && len(r.End) == 0 {
		return snapshot.Span{From: "\x00", To: "\x00"} // below every key: empty
	}
	if r.End != nil {
		span.To = escaped(r.End)
	}
	return span
}

// escaped returns key escaped as EntryID escapes it.
func escaped(key []byte) string {
	var b strings.Builder
	escapeKey(&b, key)
	return b.String()
}

// Typed returns an index as a manifest records it, its types parsed: each field's
// Postgres type as TypeFor reads it.
func Typed(d snapshot.IndexDef) (Def, error) {
	if len(d.Types) != len(d.Fields) {
		return Def{}, fmt.Errorf("%w index %s: %d fields and %d types", snapshot.ErrInvalid, d.Name, len(d.Fields), len(d.Types))
	}
	def := Def{Name: d.Name, Fields: d.Fields}
	for i, t := range d.Types {
		ty, err := TypeFor(t)
		if err != nil {
			return Def{}, fmt.Errorf("index %s field %q: %w", d.Name, d.Fields[i], err)
		}
		def.Types = append(def.Types, ty)
	}
	return def, nil
}
