package client

import (
	"cmp"
	"strconv"
	"strings"
)

// versionID is a version id as the API names it, parsed once: the id, and the creation
// time it ends with (`<uuid>-<unix-millis>`), which orders versions.
type versionID struct {
	id     string
	millis int64 // creation time in Unix milliseconds; 0 when the id names none
}

// parseVersion parses a version id; "" is the zero versionID, no version.
func parseVersion(s string) versionID {
	v := versionID{id: s}
	if ms, err := strconv.ParseInt(s[strings.LastIndexByte(s, '-')+1:], 10, 64); err == nil {
		v.millis = ms
	}
	return v
}

// String returns the id as the API spells it.
func (v versionID) String() string { return v.id }

// IsZero reports whether v names no version.
func (v versionID) IsZero() bool { return v.id == "" }

// Compare orders versions by their creation time: -1 when v was made before w, +1
// after, 0 in the same millisecond (which two distinct versions may share: only == tells
// them apart).
func (v versionID) Compare(w versionID) int { return cmp.Compare(v.millis, w.millis) }

// Less reports whether v was made before w.
func (v versionID) Less(w versionID) bool { return v.Compare(w) < 0 }

// UnmarshalText parses a version id (encoding/json calls it for a JSON string, and
// leaves v as it was for null).
func (v *versionID) UnmarshalText(b []byte) error {
	*v = parseVersion(string(b))
	return nil
}

// changesKind is what a version did to a collection, as GET
// /v1/versions/{v}/changes/{collection} says in its "kind".
type changesKind int

const (
	// changesOther is a kind this client does not know (a newer API's): the collection
	// is read whole, as for a base.
	changesOther changesKind = iota
	// changesDelta: the version changed the ids listed, against its parent.
	changesDelta
	// changesUnchanged: the version left the collection as its parent had it.
	changesUnchanged
	// changesBase: the version wrote the collection whole.
	changesBase
	// changesFull: the version is a full copy, without layers.
	changesFull
)

// changesKinds are the kinds by their names on the wire.
var changesKinds = map[string]changesKind{
	"delta": changesDelta, "unchanged": changesUnchanged, "base": changesBase, "full": changesFull}

// UnmarshalText parses a kind's name; a name it does not know is changesOther
// (encoding/json calls it for a JSON string, and leaves k as it was for null).
func (k *changesKind) UnmarshalText(b []byte) error {
	*k = changesKinds[string(b)]
	return nil
}

// follows reports whether the kind lets a replica follow the version by the ids it
// lists (none, for unchanged), rather than read the collection whole.
func (k changesKind) follows() bool { return k == changesDelta || k == changesUnchanged }
