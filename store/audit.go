package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/snapflip/snapflip/snapshot"
)

// The audit trail is the rows h#<dataset>#<millis, 13 digits>#<random> in family h, one
// cell h:entry holding the entry as JSON; listing the prefix gives entries in time
// order. Family h ages out after AuditRetention.
const colEntry = "entry"

var _ snapshot.AuditStore = (*Store)(nil)

func auditPrefix(dataset string) string { return "h#" + escapeComponent(dataset) + "#" }

// AppendAudit records an entry.
func (s *Store) AppendAudit(ctx context.Context, e snapshot.AuditEntry) error {
	ctx, cancel := s.op(ctx)
	defer cancel()
	body, err := json.Marshal(e)
	if err != nil {
		return err
	}
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	key := fmt.Sprintf("%s%013d#%s", auditPrefix(e.Dataset), e.At.UnixMilli(), hex.EncodeToString(nonce[:]))
	mut := bigtable.NewMutation()
	mut.Set(famAudit, colEntry, bigtable.Time(e.At), body)
	if err := s.tbl.Apply(ctx, key, mut); err != nil {
		return s.wrap(err, "record %s of dataset %s", e.Action, e.Dataset)
	}
	return nil
}

// ListAudit returns a dataset's entries, newest first, at most limit (0: all). With a
// limit it reads those rows alone, in reverse: the newest entries cost the same after
// millions of flips as after ten.
func (s *Store) ListAudit(ctx context.Context, dataset string, limit int) ([]snapshot.AuditEntry, error) {
	prefix := auditPrefix(dataset)
	if limit > 0 {
		return s.readAudit(ctx, dataset, bigtable.PrefixRange(prefix), bigtable.ReverseScan(), bigtable.LimitRows(int64(limit)))
	}
	out, err := s.readAudit(ctx, dataset, bigtable.PrefixRange(prefix))
	slices.Reverse(out)
	return out, err
}

// AuditAt returns the newest entry at or before t (snapshot.AuditStore): the rows read
// in reverse from t's millisecond down to the newest entry's millisecond (a key holds
// the millisecond, the entry its time, and entries of one millisecond sort by a random
// suffix), and, when there is none, the oldest row, to say where the trail begins.
func (s *Store) AuditAt(ctx context.Context, dataset string, t time.Time) (snapshot.AuditEntry, error) {
	prefix := auditPrefix(dataset)
	// Every key of an entry at or before t sorts before this one.
	end := fmt.Sprintf("%s%013d$", prefix, max(t.UnixMilli(), 0))
	var best snapshot.AuditEntry
	found := false
	err := s.eachAudit(ctx, dataset, bigtable.NewRange(prefix, end), func(e snapshot.AuditEntry) bool {
		switch {
		case found && e.At.UnixMilli() < best.At.UnixMilli():
			return false // an older millisecond than the newest entry found
		case e.At.After(t): // later within t's millisecond
		case !found || e.At.After(best.At):
			best, found = e, true
		}
		return true
	}, bigtable.ReverseScan())
	if err != nil || found {
		return best, err
	}
	oldest, err := s.readAudit(ctx, dataset, bigtable.PrefixRange(prefix), bigtable.LimitRows(1))
	switch {
	case err != nil:
		return snapshot.AuditEntry{}, err
	case len(oldest) == 0:
		return snapshot.AuditEntry{}, fmt.Errorf("%w: the audit trail is empty", snapshot.ErrNotFound)
	}
	return snapshot.AuditEntry{}, fmt.Errorf("%w: no version was current at %s in the audit trail, which begins at %s",
		snapshot.ErrNotFound, t.UTC().Format(time.RFC3339), oldest[0].At.UTC().Format(time.RFC3339))
}

// readAudit decodes the entries of the rows read from rr with opts, in the order read.
func (s *Store) readAudit(ctx context.Context, dataset string, rr bigtable.RowSet, opts ...bigtable.ReadOption) ([]snapshot.AuditEntry, error) {
	var out []snapshot.AuditEntry
	err := s.eachAudit(ctx, dataset, rr, func(e snapshot.AuditEntry) bool { out = append(out, e); return true }, opts...)
	return out, err
}

// eachAudit calls fn with the entry of each row read from rr with opts, in the order
// read, until fn returns false.
func (s *Store) eachAudit(ctx context.Context, dataset string, rr bigtable.RowSet, fn func(snapshot.AuditEntry) bool, opts ...bigtable.ReadOption) error {
	ctx, cancel := s.op(ctx)
	defer cancel()
	var derr error
	err := s.tbl.ReadRows(ctx, rr, func(r bigtable.Row) bool {
		cells := r[famAudit]
		if len(cells) == 0 {
			return true
		}
		var e snapshot.AuditEntry
		if err := json.Unmarshal(cells[0].Value, &e); err != nil {
			derr = fmt.Errorf("audit row %s: %w", r.Key(), err)
			return false
		}
		return fn(e)
	}, append(opts, bigtable.RowFilter(bigtable.LatestNFilter(1)))...)
	if err != nil {
		return s.wrap(err, "list audit of dataset %s", dataset)
	}
	return derr
}
