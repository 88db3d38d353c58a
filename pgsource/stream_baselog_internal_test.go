package pgsource

import (
	"slices"
	"strings"
	"testing"
)

// A key log keeps the keys of the transactions its base's snapshot does not see,
// those held before the snapshot was taken included; it breaks, rather than tell a
// part, on a transaction whose keys of the collection are not known (a truncate, keys
// let go) or on too many keys.
func TestKeyLogKeepsWhatTheBaseDoesNotSee(t *testing.T) {
	txn := func(xid uint32, keys ...string) *heldTxn {
		h := &heldTxn{xid: xid}
		for _, k := range keys {
			h.addKey("users", k)
		}
		h.addKey("orders", "o")
		return h
	}
	st := &stream{held: []*heldTxn{txn(100, "a"), txn(105, "b")}, tables: LogicalTables{Collections: []LogicalCollection{{Collection: "users", Key: []string{"id"}}}}}
	log := st.beginLog("users")
	st.logLocked(txn(106, "c")) // committed before the snapshot, received after the log began
	st.logFrom(log, "101:106:103")
	st.logLocked(txn(107, "d", "c")) // after the snapshot
	st.logLocked(txn(103, "e"))      // in progress when the snapshot was taken
	got := func(snap string) []string {
		vis, err := parseVisibility(snap)
		if err != nil {
			t.Fatal(err)
		}
		k, ok := st.keysSince("users", "101:106:103", vis)
		if !ok {
			return nil
		}
		return k.keys
	}
	if k := got("108:108:"); !slices.Equal(k, []string{"c", "d", "e"}) {
		t.Errorf("keys since the base, seen by a later snapshot = %v; want c d e (not a nor b: the base sees them)", k)
	}
	if k := got("107:107:"); !slices.Equal(k, []string{"c", "e"}) {
		t.Errorf("keys seen by a snapshot before 107 = %v; want c e", k)
	}
	if _, ok := st.keysSince("users", "100:100:", parseVis(t, "108:108:")); ok {
		t.Error("a log answered for another base's snapshot")
	}
	dirty := txn(110)
	dirty.markDirty("users", "truncated")
	st.logLocked(dirty)
	if k := got("111:111:"); k != nil || !strings.Contains(log.broken, "truncated") {
		t.Errorf("after a truncate: keys %v, broken %q; want no answer, broken by the truncate", k, log.broken)
	}
	many := st.beginLog("users")
	st.logFrom(many, "200:200:")
	big := &heldTxn{xid: 201}
	for i := range maxStreamKeys + 1 {
		big.addKey("users", string(rune(i)))
	}
	st.logLocked(big)
	if many.broken == "" || many.txns != nil {
		t.Errorf("a log over %d keys = broken %q with %d transactions; want broken and emptied", maxStreamKeys, many.broken, len(many.txns))
	}
}

func parseVis(t *testing.T, s string) visibility {
	t.Helper()
	v, err := parseVisibility(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
