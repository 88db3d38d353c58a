package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// historyCommand is `syncer history`: the audit trail.
func (m *Syncer) historyCommand(g *syncerFlags) *cobra.Command {
	var (
		asJSON bool
		limit  int
	)
	c := &cobra.Command{
		Use:   "history",
		Short: "The audit trail: flips, rollbacks, unpins",
		Long: `History lists the dataset's audit trail, newest first: every flip, rollback and
unpin with when, who, why, from, to and the fencing token (kept 90 days).`,
		Example: `  syncer history --config snapflip.yaml
  syncer history --config snapflip.yaml --json --limit 0`,
		Args: positional(),
		RunE: m.readRun(g, func(ctx context.Context, e *readEnv, _ []string) error {
			entries, err := e.store.ListAudit(ctx, e.cfg.Dataset, limit)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.out, entries)
			}
			tw := tabwriter.NewWriter(e.out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "WHEN\tACTION\tFROM\tTO\tTOKEN\tBY\tREASON")
			for _, en := range entries {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", en.At.UTC().Format(time.RFC3339), en.Action, en.From, en.To, en.Token, en.By, en.Reason)
			}
			return tw.Flush()
		}),
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().IntVar(&limit, "limit", 50, "entries to show (0: all)")
	return c
}
