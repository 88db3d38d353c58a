package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/snapflip/snapflip/api"
	"github.com/snapflip/snapflip/snapshot"
)

// versionsCommand is `syncer versions`: the dataset's versions, newest first.
func (m *Syncer) versionsCommand(g *syncerFlags) *cobra.Command {
	var asJSON bool
	var limit int
	c := &cobra.Command{
		Use:   "versions",
		Short: "List versions, newest first",
		Long: `Versions lists the dataset's versions, newest first, with their state, age, counts
per collection, source LSN, fencing token, current/previous/pinned marks and the TTL
left (counted from the oldest layer a read consults), and what each publish wrote:
SHAPE is full for a full copy, or for a layered version base, delta or mixed by the
layers its collections wrote (unchanged when none wrote one); CHAIN is the longest
chain of layers a read consults; WRITTEN the bytes sent to storage; PARENT the version
a layered version's deltas were computed against. It lists the newest --limit versions
(100; 0 for all, which a table that changes all the time makes hundreds of thousands).
Below the table, a line per base built beside the stream of versions (in hand, or
ended within the hour): its state, rows and bytes written of those expected, time
left, the syncer building it and why; with --json these lines go to the log.`,
		Example: `  syncer versions --config snapflip.yaml
  syncer versions --config snapflip.yaml --limit 10 --json`,
		Args: positional(),
		RunE: m.readRun(g, func(ctx context.Context, e *readEnv, _ []string) error {
			return listVersions(ctx, e, limit, asJSON)
		}),
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().IntVar(&limit, "limit", defaultVersionsLimit, "list the newest this many versions; 0 lists all")
	return c
}

// versionRow is one line of `syncer versions`.
type versionRow struct {
	Version  snapshot.Version `json:"version"`
	State    snapshot.State   `json:"state"`
	Marks    []string         `json:"marks,omitempty"`
	Started  time.Time        `json:"started_at"`
	Age      string           `json:"age"`
	Counts   map[string]int64 `json:"counts"`
	Source   string           `json:"source_lsn"`
	Fence    uint64           `json:"token,omitempty"`
	TTLLeft  string           `json:"ttl_left,omitempty"`
	Reason   string           `json:"reason,omitempty"`
	Complete bool             `json:"complete"`
	Format   int              `json:"format"`
	// Shape is api.VersionShape's: full, base, delta, mixed, unchanged, or "" unknown.
	Shape        string           `json:"shape,omitempty"`
	ChainLength  int              `json:"chain_length"`
	BytesWritten int64            `json:"bytes_written"`
	Parent       snapshot.Version `json:"parent,omitempty"`
}

// defaultVersionsLimit is `syncer versions --limit`'s default.
const defaultVersionsLimit = 100

func listVersions(ctx context.Context, e *readEnv, limit int, asJSON bool) error {
	if limit < 0 {
		return fmt.Errorf("%w: --limit %d: must be 0 (all) or positive", ErrUsage, limit)
	}
	var ms []snapshot.Manifest // newest first
	var err error
	if limit == 0 {
		ms, err = e.store.ListManifests(ctx, e.cfg.Dataset)
		slices.Reverse(ms)
	} else {
		// One more than asked, to say whether older ones were left out.
		ms, err = e.store.RecentManifests(ctx, e.cfg.Dataset, "", min(limit, math.MaxInt-1)+1)
	}
	if err != nil {
		return err
	}
	more := limit > 0 && len(ms) > limit
	if more {
		ms = ms[:limit]
	}
	ptr, err := e.store.ReadPointer(ctx, e.cfg.Dataset)
	if err != nil && !errors.Is(err, snapshot.ErrNoVersion) {
		return err
	}
	if more {
		ms = snapshot.WithVersion(ctx, ms, ptr.Version, func(ctx context.Context, v snapshot.Version) (snapshot.Manifest, error) {
			return e.store.ReadManifest(ctx, e.cfg.Dataset, v)
		})
	}
	now := time.Now()
	rows := versionRows(ms, ptr, e.cfg.TTL, now)
	var bases []snapshot.BaseStatus
	if len(rows) > 0 { // no version: no table, maybe, and no base
		recs, err := e.store.ListBases(ctx, e.cfg.Dataset)
		if err != nil {
			return err
		}
		bases = api.BasesShown(recs, now)
	}
	if asJSON {
		if more {
			e.log.Info("older versions not listed", "limit", limit, "all", "--limit 0")
		}
		for _, b := range bases {
			e.log.Info(api.BaseLine(b, now))
		}
		return printJSON(e.out, rows)
	}
	if len(rows) == 0 {
		// An empty table's header alone reads like a failure to read.
		_, err := fmt.Fprintf(e.out, "no versions of dataset %s in table %s: nothing has been published yet (syncer once publishes the first)\n",
			e.cfg.Dataset, e.cfg.Bigtable.Table)
		return err
	}
	if err := writeVersions(e.out, rows); err != nil {
		return err
	}
	for _, b := range bases {
		if _, err := fmt.Fprintln(e.out, api.BaseLine(b, now)); err != nil {
			return err
		}
	}
	if !more {
		return nil
	}
	_, err = fmt.Fprintf(e.out, "older versions not shown: --limit %d lists more, --limit 0 all\n", 10*limit)
	return err
}

// versionRows describes the manifests ms, newest first, against the pointer ptr; ttl
// is the configured TTL, for manifests without their own.
func versionRows(ms []snapshot.Manifest, ptr snapshot.Pointer, ttl time.Duration, now time.Time) []versionRow {
	rows := make([]versionRow, 0, len(ms))
	for _, m := range ms {
		r := versionRow{Version: m.Version, State: m.State, Started: m.StartedAt, Age: now.Sub(m.StartedAt).Round(time.Second).String(),
			Counts: m.Counts(), Source: m.Source.String(), Fence: m.Fence, Reason: m.Reason, Complete: m.CheckComplete() == nil,
			Format: m.Format, Shape: api.VersionShape(m), ChainLength: m.ChainLength(), BytesWritten: m.BytesWritten, Parent: m.Parent}
		if exp := m.ExpiresAt(ttl); !exp.IsZero() {
			r.TTLLeft = max(exp.Sub(now), 0).Round(time.Second).String()
		}
		if m.Version == ptr.Version {
			r.Marks = append(r.Marks, "current")
			if ptr.Pinned {
				r.Marks = append(r.Marks, "pinned")
			}
		}
		if m.Version == ptr.Previous && ptr.Previous != "" {
			r.Marks = append(r.Marks, "previous")
		}
		rows = append(rows, r)
	}
	return rows
}

// writeVersions prints the rows as a table.
func writeVersions(w io.Writer, rows []versionRow) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tSTATE\tMARKS\tAGE\tTTL LEFT\tCOUNTS\tSOURCE\tTOKEN\tSHAPE\tCHAIN\tWRITTEN\tPARENT")
	for _, r := range rows {
		var counts []string
		for _, n := range slices.Sorted(maps.Keys(r.Counts)) {
			counts = append(counts, fmt.Sprintf("%s=%d", n, r.Counts[n]))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\n", r.Version, r.State, strings.Join(r.Marks, ","), r.Age,
			r.TTLLeft, strings.Join(counts, " "), r.Source, r.Fence, dash(r.Shape), r.ChainLength, humanBytes(r.BytesWritten),
			dash(string(r.Parent)))
	}
	return tw.Flush()
}

// dash returns s, or "-" for an empty cell.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
