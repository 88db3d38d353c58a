package pgsource

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/snapflip/snapflip/snapshot"
)

// Keys since a base read beside the stream (docs/design.md, "Held collections"). A
// base of one collection read in a snapshot of its own is taken by a later version,
// which catches it up with the changes since the base's snapshot: not since its
// parent's, which the stream's delta is exact for. While this process reads the
// stream, OpenBase starts a key log for the collection: the keys of every committed
// transaction the base's snapshot does not see, from before the snapshot was taken
// on, so that the version's ScanKeyed since the base's position reads those keys
// alone rather than comparing the whole table.

var _ snapshot.BaseOpener = (*Source)(nil)

// keyLog is one collection's log of the keys changed since a base's snapshot.
type keyLog struct {
	collection string
	// snapshot is the base snapshot's text once it is taken (vis its visibility);
	// until then every transaction is kept, and those it sees are dropped then.
	snapshot string
	vis      *visibility
	txns     []loggedTxn
	keys     int
	// broken says why the log does not hold every change since the snapshot; "" when
	// it does.
	broken string
}

// loggedTxn is a transaction's keys of the logged collection.
type loggedTxn struct {
	xid  uint32
	keys []string
}

// OpenBase opens a snapshot to read one collection's base beside the stream of
// versions (snapshot.BaseOpener): Open, of that collection alone, and, while this
// process reads the stream, a key log of the collection from before the snapshot
// on, replacing the one before.
func (s *Source) OpenBase(ctx context.Context, collection string) (snapshot.SourceSnapshot, error) {
	st := s.stream.Load()
	var log *keyLog
	if st != nil {
		log = st.beginLog(collection)
	}
	i := slices.IndexFunc(s.collections, func(c Collection) bool { return c.Name == collection })
	if i < 0 {
		return nil, fmt.Errorf("%w: no collection %q", snapshot.ErrInvalid, collection)
	}
	// The snapshot touches the collection's table alone: a lock on another table
	// would hold DDL on it up as long as the first chunk is read.
	began := time.Now()
	first, err := s.openOf(ctx, nil, s.collections[i:i+1], nil)
	if err != nil {
		return nil, err
	}
	b, err := s.chunked(ctx, first.(*snap), collection, began)
	if err != nil {
		_ = first.Close(ctx)
		return nil, err
	}
	if log != nil {
		st.logFrom(log, first.Position().PgSnapshot)
	}
	return b, nil
}

// beginLog starts a key log of collection: every held transaction's keys of it, and
// every later one's. A held transaction a pointer's snapshot saw before this is seen
// by the base's snapshot, taken after.
func (st *stream) beginLog(collection string) *keyLog {
	st.mu.Lock()
	defer st.mu.Unlock()
	log := &keyLog{collection: collection}
	if st.gone != nil {
		if why, dirty := st.gone.dirty[collection]; dirty {
			log.broken = "the stream let its keys go: " + why
		}
	}
	for _, t := range st.held {
		log.add(t)
	}
	if st.logs == nil {
		st.logs = map[string]*keyLog{}
	}
	st.logs[collection] = log
	return log
}

// logFrom sets the log's snapshot, snapText: the transactions it sees are dropped.
func (st *stream) logFrom(log *keyLog, snapText string) {
	vis, err := parseVisibility(snapText)
	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil {
		log.broken = fmt.Sprintf("the base's snapshot %q does not parse", snapText)
		return
	}
	log.snapshot, log.vis = snapText, &vis
	log.txns = slices.DeleteFunc(log.txns, func(t loggedTxn) bool {
		if vis.sees(t.xid) {
			log.keys -= len(t.keys)
			return true
		}
		return false
	})
}

// logLocked adds a committed transaction to every key log. Under st.mu.
func (st *stream) logLocked(t *heldTxn) {
	for _, log := range st.logs {
		log.add(t)
	}
}

// add keeps t's keys of the log's collection, unless the log's snapshot sees t.
func (log *keyLog) add(t *heldTxn) {
	if log.broken != "" || (log.vis != nil && log.vis.sees(t.xid)) {
		return
	}
	if why, dirty := t.dirty[log.collection]; dirty {
		log.broken, log.txns = why, nil
		return
	}
	var keys []string
	for _, k := range t.keys {
		if k.collection == log.collection {
			keys = append(keys, k.key)
		}
	}
	if len(keys) == 0 {
		return
	}
	log.txns = append(log.txns, loggedTxn{xid: t.xid, keys: keys})
	if log.keys += len(keys); log.keys > maxStreamKeys {
		log.broken, log.txns = fmt.Sprintf("over %d keys changed since the base's snapshot", maxStreamKeys), nil
	}
}

// keysSince returns the keys of collection changed since the base snapshot
// sinceSnap that the snapshot vis sees, and whether the stream's log of them is
// whole: false when no log of that snapshot is kept, or it is broken.
func (st *stream) keysSince(collection, sinceSnap string, vis visibility) (*streamKeys, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	log := st.logs[collection]
	if log == nil || log.vis == nil || log.snapshot != sinceSnap || log.broken != "" {
		return nil, false
	}
	keys := map[string]struct{}{}
	for _, t := range log.txns {
		if vis.sees(t.xid) {
			for _, k := range t.keys {
				keys[k] = struct{}{}
			}
		}
	}
	for _, c := range st.tables.Collections {
		if c.Collection == collection {
			return &streamKeys{keys: slices.Sorted(maps.Keys(keys)), cols: c.Key, oid: c.Relation.OID}, true
		}
	}
	return nil, false
}

// baseKeys returns the keys of the collection changed between since, where a base
// read beside the stream stands, and this snapshot, when the stream's key log tells
// them exactly: the snapshot was placed in the stream, and reads the same table
// (definitions and files) the base did.
func (r *snap) baseKeys(cr *collectionRead, since *snapshot.Position) (*streamKeys, bool) {
	st := r.src.stream.Load()
	name := cr.c.Name
	if st == nil || r.delta.pos == nil || since.Stream == nil || since.Stream.Reading != r.delta.pos.Reading {
		return nil, false
	}
	files := r.pos.Files[name]
	if defs := r.pos.Definitions[name]; defs == "" || defs != since.Definitions[name] || files == "" || files != since.Files[name] {
		return nil, false
	}
	vis, err := parseVisibility(r.pos.PgSnapshot)
	if err != nil {
		return nil, false
	}
	keys, ok := st.keysSince(name, since.PgSnapshot, vis)
	if !ok || !filesOf(files, keys.oid) {
		return nil, false
	}
	return keys, true
}
