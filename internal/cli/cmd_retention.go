package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// retentionCommand is `syncer retention`: the table's GC rules against what the
// datasets sharing it need, and with --apply the explicit change of the rules to what
// this config asks for.
func (m *Syncer) retentionCommand(g *syncerFlags) *cobra.Command {
	var apply bool
	c := &cobra.Command{
		Use:   "retention [--apply]",
		Short: "Show the table's GC rules and what the datasets sharing it need; --apply sets them",
		Long: `Retention prints the GC rule of each column family of the config's Bigtable table and
how long it keeps a cell, the rules this config's ttl asks for (documents, family d:
ttl; manifests, family m: ttl + 24h), and every dataset sharing the table (found by
its pointer) with its current version, whether it is pinned, the TTL that version was
written with, the age of the oldest layer its chains read, and so how long it needs
documents kept: its TTL, and more than that age plus a tenth of the TTL. Without
--apply it only reads.

No other command changes a GC rule: a syncer whose ttl needs longer rules than the
table has refuses to start and names this command. With --apply it sets the rules of
families d and m to what this config asks for, and says what it changed, old rule
and new. It refuses, changing nothing and naming the dataset and its need, a rule
shorter than what any dataset sharing the table needs: shorter than the TTL of its
current version, or one that would collect the oldest layer of a current (or pinned)
version within the margin. To shorten retention, publish with the shorter ttl first
(syncer once --force), so that the current version is written with it.`,
		Example: `  syncer retention --config snapflip.yaml
  syncer retention --apply --config snapflip.yaml`,
		Args: positional(),
		RunE: m.readRun(g, func(ctx context.Context, e *readEnv, _ []string) error {
			rep, err := readRetention(ctx, e.store, e.cfg, time.Now())
			if err != nil {
				return err
			}
			plan := store.PlanRetention(rep.table, e.cfg.StoreConfig(), rep.needs())
			if err := rep.print(e.out, e.cfg, plan, apply); err != nil {
				return err
			}
			if !apply || len(plan.Changes) == 0 {
				return nil
			}
			if err := e.store.ApplyRetention(ctx, plan); err != nil {
				return fmt.Errorf("%w (nothing changed)", err)
			}
			for _, c := range plan.Changes {
				fmt.Fprintf(e.out, "set the GC rule of family %s (%s) from %s to %s\n", c.From.Family, store.Holds(c.From.Family), c.From, c.To)
			}
			return nil
		}),
	}
	c.Flags().BoolVar(&apply, "apply", false, "set the GC rules of documents and manifests to what this config's ttl asks for")
	return c
}

// datasetRetention is one dataset sharing the table: its pointer and what its current
// version needs, or why that is not known.
type datasetRetention struct {
	dataset string
	ptr     snapshot.Pointer
	need    snapshot.RetentionNeed
	// missing says why the current version's manifest could not be read ("" when it
	// was); the dataset then asks nothing of the rules.
	missing string
}

// retentionReport is what `syncer retention` reads.
type retentionReport struct {
	table    store.Retention
	datasets []datasetRetention // in dataset order
}

// readRetention reads the table's GC rules and, for every dataset sharing the table,
// its pointer and its current version's manifest: one admin read and row reads.
// ttl stands in for manifests without a TTL of their own.
func readRetention(ctx context.Context, st *store.Store, cfg SyncerConfig, now time.Time) (retentionReport, error) {
	ret, err := st.Retention(ctx)
	if err != nil {
		return retentionReport{}, err
	}
	ptrs, err := st.ListPointers(ctx)
	if err != nil {
		return retentionReport{}, err
	}
	rep := retentionReport{table: ret}
	for _, ds := range slices.Sorted(maps.Keys(ptrs)) {
		d := datasetRetention{dataset: ds, ptr: ptrs[ds]}
		m, err := st.ReadManifest(ctx, ds, d.ptr.Version)
		switch {
		case errors.Is(err, snapshot.ErrNotFound):
			d.missing = "its manifest is gone (expired)"
		case err != nil:
			return retentionReport{}, fmt.Errorf("dataset %s: %w", ds, err)
		default:
			d.need = snapshot.NeedOf(ds, d.ptr, m, cfg.TTL, now)
		}
		rep.datasets = append(rep.datasets, d)
	}
	return rep, nil
}

// needs returns what the datasets whose current version is known need.
func (r retentionReport) needs() []snapshot.RetentionNeed {
	var out []snapshot.RetentionNeed
	for _, d := range r.datasets {
		if d.missing == "" {
			out = append(out, d.need)
		}
	}
	return out
}

// print writes the report, and what --apply would do or why it refuses.
func (r retentionReport) print(w io.Writer, cfg SyncerConfig, plan store.RetentionPlan, apply bool) error {
	fmt.Fprintf(w, "table %s\n", r.table.Table)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  FAMILY\tHOLDS\tGC RULE\tKEEPS CELLS")
	for _, f := range r.table.Families {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", f.Family, dash(store.Holds(f.Family)), f, store.FormatLife(f.Keep))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	want := cfg.StoreConfig().Wanted()
	fmt.Fprintf(w, "\nthis config (dataset %s, ttl %s) asks for\n", cfg.Dataset, store.FormatLife(cfg.TTL))
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, f := range []store.FamilyRule{want.Docs, want.Manifests} {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", f.Family, store.Holds(f.Family), f, store.FormatLife(f.Keep))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\ndatasets sharing the table: %d\n", len(r.datasets))
	if len(r.datasets) > 0 {
		tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  DATASET\tCURRENT\tPINNED\tTTL\tOLDEST LAYER AGE\tNEEDS DOCUMENTS KEPT")
		for _, d := range r.datasets {
			if d.missing != "" {
				fmt.Fprintf(tw, "  %s\t%s\t%t\t-\t-\t- (%s)\n", d.dataset, d.ptr.Version, d.ptr.Pinned, d.missing)
				continue
			}
			fmt.Fprintf(tw, "  %s\t%s\t%t\t%s\t%s\t%s\n", d.dataset, d.ptr.Version, d.ptr.Pinned, store.FormatLife(d.need.TTL),
				store.FormatLife(d.need.Age.Round(time.Second)), store.FormatLife(d.need.Keep().Round(time.Second)))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	switch {
	case len(plan.Changes) == 0:
		fmt.Fprintln(w, "the rules of documents and manifests are as this config asks; --apply changes nothing")
	case len(plan.Refusals) > 0:
		for _, ref := range plan.Refusals {
			fmt.Fprintf(w, "refused: %s\n", ref)
		}
		if !apply {
			fmt.Fprintln(w, "--apply would refuse to set this config's rules")
		}
	case !apply:
		for _, c := range plan.Changes {
			fmt.Fprintf(w, "--apply would set the GC rule of family %s (%s) from %s to %s\n", c.From.Family, store.Holds(c.From.Family), c.From, c.To)
		}
	}
	return nil
}
