package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/snapflip/snapflip/pgsource"
)

// logicalConfig names the publication and slot of watch.mode logical.
func (c SyncerConfig) logicalConfig() pgsource.LogicalConfig {
	return pgsource.LogicalConfig{Publication: c.Watch.Publication, Slot: c.Watch.Slot}
}

// printLogical writes syncer check's section on watch.mode logical.
func printLogical(w io.Writer, r pgsource.LogicalReport) {
	fmt.Fprintf(w, "\nwatch.mode logical\n")
	switch {
	case !r.PublicationExists:
		fmt.Fprintf(w, "  publication %s: does not exist yet: the syncer creates it\n", r.Publication)
	case r.PublicationOurs:
		fmt.Fprintf(w, "  publication %s: exists, created by snapflip (owner %s)\n", r.Publication, r.PublicationOwner)
	default:
		fmt.Fprintf(w, "  publication %s: exists, not created by snapflip (owner %s): the syncer uses it as it is\n", r.Publication, r.PublicationOwner)
	}
	fmt.Fprintf(w, "  tables      %s\n", strings.Join(r.Tables, ", "))
	for _, stmt := range r.Pending {
		fmt.Fprintf(w, "  to run      %s\n", stmt)
	}
	switch {
	case !r.SlotExists:
		fmt.Fprintf(w, "  slot %s: does not exist yet: the syncer creates it\n", r.Slot)
	case r.SlotActive:
		fmt.Fprintf(w, "  slot %s: active (process %d), wal_status %s, retaining %s of WAL\n", r.Slot, r.SlotPID, r.SlotWALStatus, humanBytes(r.SlotRetainedBytes))
	default:
		fmt.Fprintf(w, "  slot %s: inactive, wal_status %s, retaining %s of WAL\n", r.Slot, r.SlotWALStatus, humanBytes(r.SlotRetainedBytes))
	}
	if r.SlotWALStatus == pgsource.WALLost {
		fmt.Fprintf(w, "  slot %s lost WAL it needed: the syncer drops it, creates it again and compares its next version in full\n", r.Slot)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  problem   %s\n", p)
	}
}

// unwatchLogical is syncer unwatch's part for watch.mode logical: it drops the slot
// and the publication snapflip created, and says which.
func unwatchLogical(ctx context.Context, w io.Writer, src *pgsource.Source, cfg SyncerConfig) error {
	lc := cfg.logicalConfig()
	slot, pub, err := src.RemoveLogical(ctx, lc)
	if err != nil {
		return fmt.Errorf("unwatch: %w", err)
	}
	if slot {
		fmt.Fprintf(w, "dropped replication slot %s\n", lc.Slot)
	} else {
		fmt.Fprintf(w, "no replication slot %s to drop\n", lc.Slot)
	}
	if pub {
		fmt.Fprintf(w, "dropped publication %s\n", lc.Publication)
	} else {
		fmt.Fprintf(w, "no publication %s created by snapflip to drop (a DBA's is kept)\n", lc.Publication)
	}
	if cfg.Watch.logical() {
		fmt.Fprintln(w, "note: this config still says watch.mode: logical; a syncer running with it creates them again")
	}
	return nil
}
