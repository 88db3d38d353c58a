package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"iter"
	"maps"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"
)

// replicaState is one whole version of a replica's collections. It never changes once
// swapped in: a flip makes a new one, which shares every unchanged document (and
// every unchanged index entry) with the old.
type replicaState struct {
	version   string
	flippedAt time.Time
	covers    string // the newest snapshot token the version was known to cover when swapped in
	colls     replicaColls
	// held names, per held collection the replica holds, the token of the earlier
	// position it reflects.
	held map[string]string
}

// get returns a document of the version; st may be nil (nothing loaded yet).
func (st *replicaState) get(collection, id string) (Document, bool) {
	if st == nil {
		return Document{}, false
	}
	c := st.colls.get(collection)
	if c == nil {
		return Document{}, false
	}
	body, ok := c.get(id)
	if !ok {
		return Document{}, false
	}
	return Document{ID: id, JSON: body, Version: st.version}, true
}

// replicaColls are a version's collections, by name. They are few: looking one up by
// comparing names costs less than hashing the name.
type replicaColls []namedColl

type namedColl struct {
	name string
	c    *replicaColl
}

func (cs replicaColls) get(name string) *replicaColl {
	for i := range cs {
		if cs[i].name == name {
			return cs[i].c
		}
	}
	return nil
}

// replicaColl is one collection of a replica's version: a base map, shared from
// version to version, and the changes made since it was built. Changes pile up in
// over, copied per flip, until they outgrow 1,024 + an eighth of base; then a flip
// folds them into a new base. A flip therefore copies at most that many changes, and a
// fold, every so many changed ids, the collection once: never the collection per flip.
type replicaColl struct {
	base    map[string]json.RawMessage
	over    map[string]json.RawMessage // id → document, or nil: deleted
	n       int                        // documents
	indexes map[string]*fieldIndex     // field → index
}

// foldAt returns how many changes a collection of n documents keeps beside its base
// before folding them in.
func foldAt(n int) int { return 1024 + n/8 }

func (c *replicaColl) get(id string) (json.RawMessage, bool) {
	if len(c.over) > 0 {
		if body, ok := c.over[id]; ok {
			return body, body != nil
		}
	}
	body, ok := c.base[id]
	return body, ok
}

func (c *replicaColl) each(fn func(id string, body []byte) bool) {
	for id, body := range c.over {
		if body != nil && !fn(id, body) {
			return
		}
	}
	for id, body := range c.base {
		if _, ok := c.over[id]; !ok && !fn(id, body) {
			return
		}
	}
}

// newReplicaColl returns a collection of the documents, with indexes on fields.
func newReplicaColl(docs map[string]json.RawMessage, fields []string) *replicaColl {
	docs = compactKeys(len(docs), maps.All(docs))
	c := &replicaColl{base: docs, n: len(docs), indexes: make(map[string]*fieldIndex, len(fields))}
	for _, f := range fields {
		c.indexes[f] = buildIndex(c, f)
	}
	return c
}

// apply returns the collection with changes made: a document for each id written, nil
// for each id deleted. The receiver is not modified.
func (c *replicaColl) apply(changes map[string]json.RawMessage) *replicaColl {
	next := &replicaColl{base: c.base, n: c.n, indexes: make(map[string]*fieldIndex, len(c.indexes))}
	for f, fi := range c.indexes {
		next.indexes[f] = fi.apply(c, f, changes)
	}
	next.over = make(map[string]json.RawMessage, len(c.over)+len(changes))
	maps.Copy(next.over, c.over)
	for id, body := range changes {
		_, had := c.get(id)
		switch {
		case had && body == nil:
			next.n--
		case !had && body != nil:
			next.n++
		}
		if _, inBase := c.base[id]; body == nil && !inBase {
			delete(next.over, id) // deleted, and not in base: nothing to hide
			continue
		}
		next.over[id] = body
	}
	if len(next.over) > foldAt(len(next.base)) {
		next.fold()
	}
	return next
}

// compactKeys returns the n documents docs yields in a new map whose keys are laid out
// one after the other in one string. A lookup compares the id with a key it finds: in
// a map built as documents were decoded, the keys are scattered among the documents,
// and that comparison costs a cache miss (and, past the TLB's reach, a page walk) of
// its own; packed together, they stay in the caches.
func compactKeys(n int, docs iter.Seq2[string, json.RawMessage]) map[string]json.RawMessage {
	ids := make([]string, 0, n)
	bodies := make([]json.RawMessage, 0, n)
	size := 0
	for id, body := range docs {
		ids, bodies = append(ids, id), append(bodies, body)
		size += len(id)
	}
	var b strings.Builder
	b.Grow(size)
	for _, id := range ids {
		b.WriteString(id)
	}
	all := b.String()
	out := make(map[string]json.RawMessage, len(ids))
	for i, id := range ids {
		out[all[:len(id)]] = bodies[i]
		all = all[len(id):]
	}
	return out
}

// fold makes a new base of base and over.
func (c *replicaColl) fold() {
	n := c.n
	c.base = compactKeys(n, func(yield func(string, json.RawMessage) bool) {
		for id, body := range c.base {
			if _, changed := c.over[id]; !changed && !yield(id, body) {
				return
			}
		}
		for id, body := range c.over {
			if body != nil && !yield(id, body) {
				return
			}
		}
	})
	c.over = nil
	for _, fi := range c.indexes {
		fi.fold()
	}
}

// fieldIndex maps the values of one field to the ids that hold them, in id order,
// kept like the documents: a shared base and the entries changed since.
type fieldIndex struct {
	base map[string][]string
	over map[string][]string // key → its ids now (empty: none)
}

func (fi *fieldIndex) ids(key string) []string {
	if ids, ok := fi.over[key]; ok {
		return ids
	}
	return fi.base[key]
}

func buildIndex(c *replicaColl, field string) *fieldIndex {
	fi := &fieldIndex{base: map[string][]string{}}
	c.each(func(id string, body []byte) bool {
		if key, ok := fieldKey(body, field); ok {
			fi.base[key] = append(fi.base[key], id)
		}
		return true
	})
	for _, ids := range fi.base {
		slices.Sort(ids)
	}
	return fi
}

// apply returns the index of the collection c with changes made, touching only the
// entries of the values the changed documents left or took.
func (fi *fieldIndex) apply(c *replicaColl, field string, changes map[string]json.RawMessage) *fieldIndex {
	type edit struct {
		add    []string
		remove map[string]bool
	}
	edits := map[string]*edit{}
	at := func(key string) *edit {
		if edits[key] == nil {
			edits[key] = &edit{remove: map[string]bool{}}
		}
		return edits[key]
	}
	for id, body := range changes {
		var oldKey, newKey string
		var hadOld, hasNew bool
		if old, ok := c.get(id); ok {
			oldKey, hadOld = fieldKey(old, field)
		}
		if body != nil {
			newKey, hasNew = fieldKey(body, field)
		}
		if hadOld && hasNew && oldKey == newKey {
			continue
		}
		if hadOld {
			at(oldKey).remove[id] = true
		}
		if hasNew {
			at(newKey).add = append(at(newKey).add, id)
		}
	}
	next := &fieldIndex{base: fi.base, over: make(map[string][]string, len(fi.over)+len(edits))}
	maps.Copy(next.over, fi.over)
	for key, e := range edits {
		ids := slices.DeleteFunc(slices.Clone(fi.ids(key)), func(id string) bool { return e.remove[id] })
		ids = append(ids, e.add...)
		slices.Sort(ids)
		next.over[key] = slices.Compact(ids)
	}
	return next
}

func (fi *fieldIndex) fold() {
	base := maps.Clone(fi.base)
	for key, ids := range fi.over {
		if len(ids) == 0 {
			delete(base, key)
		} else {
			base[key] = ids
		}
	}
	fi.base, fi.over = base, nil
}

// withIndex returns the state with an index on a collection's field added.
func (st *replicaState) withIndex(collection, field string) *replicaState {
	next := &replicaState{version: st.version, flippedAt: st.flippedAt, covers: st.covers, colls: slices.Clone(st.colls)}
	for i, nc := range next.colls {
		if nc.name == collection {
			c := *nc.c
			c.indexes = maps.Clone(nc.c.indexes)
			c.indexes[field] = buildIndex(nc.c, field)
			next.colls[i].c = &c
		}
	}
	return next
}

// fieldKey returns the key of a document's top-level field value, and whether the
// document has the field.
func fieldKey(doc []byte, field string) (string, bool) {
	var fields map[string]json.RawMessage
	if json.Unmarshal(doc, &fields) != nil {
		return "", false
	}
	raw, ok := fields[field]
	if !ok {
		return "", false
	}
	key, err := rawKey(raw)
	return key, err == nil
}

// rawKey returns the key of a JSON value: its kind and its value in one canonical
// spelling, so that equal values (1 and 1.0, "é" and "\u00e9") have one key.
func rawKey(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", fmt.Errorf("empty JSON value")
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return "s" + s, nil
	case 't', 'f', 'n':
		return string(raw), nil
	case '{', '[':
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return "", err
		}
		b, err := json.Marshal(v) // sorted keys, one spelling
		return "j" + string(b), err
	}
	f, _, err := big.ParseFloat(string(raw), 10, 256, big.ToNearestEven)
	if err != nil {
		return "", fmt.Errorf("%q is not a JSON value", truncate(string(raw), 40))
	}
	return "n" + f.Text('g', -1), nil
}

// lookupKey returns the key of a Go value, as rawKey would of its JSON.
func lookupKey(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return "s" + v, nil
	case json.RawMessage:
		return rawKey(v)
	case json.Number:
		return rawKey(json.RawMessage(v))
	case int:
		return rawKey(strconv.AppendInt(nil, int64(v), 10))
	case int64:
		return rawKey(strconv.AppendInt(nil, v, 10))
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return rawKey(b)
}
