package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

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

// ListAudit returns a dataset's entries, newest first, at most limit (0: all).
func (s *Store) ListAudit(ctx context.Context, dataset string, limit int) ([]snapshot.AuditEntry, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	var out []snapshot.AuditEntry
	var derr error
	err := s.tbl.ReadRows(ctx, bigtable.PrefixRange(auditPrefix(dataset)), func(r bigtable.Row) bool {
		cells := r[famAudit]
		if len(cells) == 0 {
			return true
		}
		var e snapshot.AuditEntry
		if err := json.Unmarshal(cells[0].Value, &e); err != nil {
			derr = fmt.Errorf("audit row %s: %w", r.Key(), err)
			return false
		}
		out = append(out, e)
		return true
	}, bigtable.RowFilter(bigtable.LatestNFilter(1)))
	if err != nil {
		return nil, s.wrap(err, "list audit of dataset %s", dataset)
	}
	slices.Reverse(out)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, derr
}
