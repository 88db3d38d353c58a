package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/snapflip/snapflip/snapshot"
)

// versionsCommand is `syncer versions`: the dataset's versions, newest first.
func (m *Syncer) versionsCommand(g *syncerFlags) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "versions",
		Short: "List versions, newest first",
		Long: `Versions lists the dataset's versions, newest first, with their state, age, counts
per collection, source LSN, fencing token, current/previous/pinned marks and the TTL
left.`,
		Example: `  syncer versions --config snapflip.yaml
  syncer versions --config snapflip.yaml --json`,
		Args: positional(),
		RunE: m.adminRun(g, func(ctx context.Context, e *adminEnv, _ []string) error {
			return listVersions(ctx, e, asJSON)
		}),
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
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
	Token    uint64           `json:"token,omitempty"`
	TTLLeft  string           `json:"ttl_left,omitempty"`
	Reason   string           `json:"reason,omitempty"`
	Complete bool             `json:"complete"`
}

func listVersions(ctx context.Context, e *adminEnv, asJSON bool) error {
	ms, err := e.store.ListManifests(ctx, e.cfg.Dataset)
	if err != nil {
		return err
	}
	ptr, err := e.store.ReadPointer(ctx, e.cfg.Dataset)
	if err != nil && !errors.Is(err, snapshot.ErrNoVersion) {
		return err
	}
	slices.Reverse(ms)
	now := time.Now()
	rows := make([]versionRow, 0, len(ms))
	for _, m := range ms {
		r := versionRow{Version: m.Version, State: m.State, Started: m.StartedAt, Age: now.Sub(m.StartedAt).Round(time.Second).String(),
			Counts: m.Counts(), Source: m.Source.String(), Token: m.Token, Reason: m.Reason, Complete: m.CheckComplete() == nil}
		if exp := m.ExpiresAt(e.cfg.TTL); !exp.IsZero() {
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
	if asJSON {
		return printJSON(e.out, rows)
	}
	tw := tabwriter.NewWriter(e.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tSTATE\tMARKS\tAGE\tTTL LEFT\tCOUNTS\tSOURCE\tTOKEN")
	for _, r := range rows {
		var counts []string
		for _, n := range slices.Sorted(maps.Keys(r.Counts)) {
			counts = append(counts, fmt.Sprintf("%s=%d", n, r.Counts[n]))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", r.Version, r.State, strings.Join(r.Marks, ","), r.Age, r.TTLLeft,
			strings.Join(counts, " "), r.Source, r.Token)
	}
	return tw.Flush()
}
