package store

import (
	"fmt"
	"strings"

	"github.com/snapflip/snapflip/snapshot"
)

// Row keys are components joined by '#'. Each component is escaped so that it never
// holds a '#', which makes keys collision-free, and so that the byte order of escaped
// keys is the byte order of the unescaped components, which makes a collection's ids
// scan in id order. A byte b <= '$' (0x24) is written as '$' followed by b+0x40; every
// other byte stands for itself. The separator '#' (0x23) sorts below '$' and below every
// unescaped byte, so a component sorts before any longer component it is a prefix of.

const (
	sep       = '#'
	escape    = '$'
	escOffset = 0x40
)

// escapeComponent returns s escaped for use inside a row key.
func escapeComponent(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] <= escape {
			n++
		}
	}
	if n == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + n)
	writeEscaped(&b, s)
	return b.String()
}

// writeEscaped writes s escaped to b.
func writeEscaped(b *strings.Builder, s string) {
	from := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= escape {
			b.WriteString(s[from:i])
			b.WriteByte(escape)
			b.WriteByte(c + escOffset)
			from = i + 1
		}
	}
	b.WriteString(s[from:])
}

// unescapeComponent reverses escapeComponent.
func unescapeComponent(s string) (string, error) {
	if strings.IndexByte(s, escape) < 0 {
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != escape {
			b.WriteByte(c)
			continue
		}
		if i+1 >= len(s) || s[i+1] < escOffset || s[i+1] > escOffset+escape {
			return "", fmt.Errorf("%w row key component %q: bad escape at byte %d", snapshot.ErrInvalid, s, i)
		}
		b.WriteByte(s[i+1] - escOffset)
		i++
	}
	return b.String(), nil
}

// docPrefix is the prefix of every document of one collection of one version.
func docPrefix(dataset string, v snapshot.Version, collection string) string {
	return "d#" + escapeComponent(dataset) + "#" + escapeComponent(string(v)) + "#" + escapeComponent(collection) + "#"
}

// docKey is the row key of one document.
func docKey(dataset string, v snapshot.Version, collection, id string) string {
	return docPrefix(dataset, v, collection) + escapeComponent(id)
}

// runPrefix is the prefix of the fingerprint run chunks of one collection of one layer.
func runPrefix(dataset string, v snapshot.Version, collection string) string {
	return "f#" + escapeComponent(dataset) + "#" + escapeComponent(string(v)) + "#" + escapeComponent(collection) + "#"
}

// runKey is the row key of chunk n of a run: the number in 10 digits, so chunks list
// in order.
func runKey(dataset string, v snapshot.Version, collection string, n int64) string {
	return fmt.Sprintf("%s%010d", runPrefix(dataset, v, collection), n)
}

// manifestPrefix is the prefix of every manifest of a dataset.
func manifestPrefix(dataset string) string { return "m#" + escapeComponent(dataset) + "#" }

// manifestKey is "m#<dataset>#<millis, 13 digits>#<uuid>": listing the prefix gives
// versions in time order.
func manifestKey(dataset string, v snapshot.Version) (string, error) {
	if _, err := snapshot.ParseVersion(string(v)); err != nil {
		return "", fmt.Errorf("manifest of %s: %w", dataset, err)
	}
	return fmt.Sprintf("%s%013d#%s", manifestPrefix(dataset), v.Millis(), v.ClientID()), nil
}

// pointerPrefix is the prefix of every dataset's pointer.
const pointerPrefix = "p#"

// pointerKey is the row key of a dataset's pointer.
func pointerKey(dataset string) string { return pointerPrefix + escapeComponent(dataset) }

// idFromDocKey returns the id of a document row key under prefix.
func idFromDocKey(prefix, key string) (string, error) {
	if !strings.HasPrefix(key, prefix) {
		return "", fmt.Errorf("%w row key %q is not under %q", snapshot.ErrInvalid, key, prefix)
	}
	return unescapeComponent(key[len(prefix):])
}

// sizingVersion stands for any version when sizing row keys: versions made now all
// have its length (a uuid, '-', 13 digits of millis), and no byte of one is escaped.
const sizingVersion = snapshot.Version("00000000-0000-0000-0000-000000000000-1000000000000")

// DocumentKeyBytes returns the bytes of the row key that stores document id of
// collection in a version of dataset: what a document or an index entry costs in
// storage beyond its value.
func DocumentKeyBytes(dataset, collection, id string) int {
	return len(docKey(dataset, sizingVersion, collection, id))
}
