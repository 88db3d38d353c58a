package store

import (
	"bytes"
	"context"
	"fmt"

	"cloud.google.com/go/bigtable"
)

// colClaim is the cell s:claim of a tick's claim row, holding the claimer's id.
const colClaim = "claim"

// tickKey is s#<dataset>#<tick number, 20 digits>, so claims list in tick order.
func tickKey(dataset string, n int64) string {
	return fmt.Sprintf("s#%s#%020d", escapeComponent(dataset), n)
}

// ClaimTick claims one scheduled tick of a dataset for holder. Exactly one claimer
// wins: the claim is written only if the row is absent (a CheckAndMutateRow whose
// predicate passes any cell, the write in its false branch). It reports whether holder
// won, and which holder owns the tick. After an RPC error it re-reads to decide, within
// OpTimeout of its own, unless ctx is cancelled.
func (s *Store) ClaimTick(ctx context.Context, dataset string, n int64, holder string) (won bool, owner string, err error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	key := tickKey(dataset, n)
	mut := bigtable.NewMutation()
	mut.Set(famSlots, colClaim, bigtable.Now(), []byte(holder))
	var exists bool
	cond := bigtable.NewCondMutation(bigtable.PassAllFilter(), nil, mut)
	applyErr := s.tbl.Apply(ctx, key, cond, bigtable.GetCondMutationResult(&exists))
	if applyErr == nil && !exists {
		return true, holder, nil
	}
	// A caller that has given up (a shutdown) will not publish the tick, whoever won
	// it: the re-read ends with its cancellation.
	rctx, cancelRead := s.rereadWhileWanted(ctx)
	defer cancelRead()
	row, err := s.tbl.ReadRow(rctx, key, bigtable.RowFilter(column(famSlots, colClaim)))
	if err != nil {
		if applyErr != nil {
			return false, "", s.wrap(applyErr, "claim tick %d of %s (re-read failed: %v)", n, dataset, err)
		}
		return false, "", s.wrap(err, "read the claim of tick %d of %s", n, dataset)
	}
	cells := row[famSlots]
	if len(cells) == 0 {
		if applyErr != nil {
			return false, "", s.wrap(applyErr, "claim tick %d of %s", n, dataset)
		}
		return false, "", fmt.Errorf("tick %d of %s: claimed, but the claim is gone", n, dataset)
	}
	owner = string(cells[0].Value)
	return bytes.Equal(cells[0].Value, []byte(holder)), owner, nil
}
