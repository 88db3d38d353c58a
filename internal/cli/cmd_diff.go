package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/spf13/cobra"

	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/snapshot"
)

// diffCommand is `syncer diff A B`: what changed between two versions.
func (m *Syncer) diffCommand(g *syncerFlags) *cobra.Command {
	var (
		coll   string
		sample int
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "diff A B",
		Short: "Count added, removed and changed ids between two versions",
		Long: `Diff counts the ids added, removed and changed from version A to version B in each
collection, with a sample of them: what a rollback from B to A would undo.
Collections whose digests are equal are not read.`,
		Example: `  syncer diff 7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1767225600000 7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1767225900000 --config snapflip.yaml
  syncer diff 7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1767225600000 7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1767225900000 --collection tenants --json`,
		Args: versionArgs("A", "B"),
		RunE: m.readRun(g, func(ctx context.Context, e *readEnv, args []string) error {
			a, b := snapshot.Version(args[0]), snapshot.Version(args[1])
			d, err := layer.Diff(ctx, e.store, layer.DiffRequest{Dataset: e.cfg.Dataset, From: a, To: b, Collection: coll, Sample: sample})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.out, d)
			}
			fmt.Fprintf(e.out, "from %s\nto   %s\n", a, b)
			for _, n := range slices.Sorted(maps.Keys(d)) {
				c := d[n]
				if c.Same {
					fmt.Fprintf(e.out, "%-24s unchanged (same digest)\n", n)
					continue
				}
				fmt.Fprintf(e.out, "%-24s +%d added  -%d removed  ~%d changed\n", n, c.Added, c.Removed, c.Changed)
				for _, s := range c.Sample {
					fmt.Fprintf(e.out, "    %s\n", s)
				}
			}
			return nil
		}),
	}
	c.Flags().StringVar(&coll, "collection", "", "only this collection")
	c.Flags().IntVar(&sample, "sample", 10, "ids to list per collection")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
