package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/snapflip/snapflip/snapshot"
)

// historyCommand is `syncer history`: the audit trail.
func (m *Syncer) historyCommand(g *syncerFlags) *cobra.Command {
	var (
		asJSON bool
		limit  int
		at     string
	)
	c := &cobra.Command{
		Use:   "history",
		Short: "The audit trail: flips, rollbacks, unpins",
		Long: `History lists the dataset's audit trail, newest first: every flip, rollback and
unpin with when, who, why, from, to and the fencing token (kept 90 days).

With --at TIME it shows instead which version was current at that moment, the entry
that made it current, and whether it can still be rolled back to: what
"syncer rollback --to-time TIME" would choose. It changes nothing.`,
		Example: `  syncer history --config snapflip.yaml
  syncer history --config snapflip.yaml --json --limit 0
  syncer history --at 2026-11-25T10:00:00Z --config snapflip.yaml`,
		Args: positional(),
		RunE: m.readRun(g, func(ctx context.Context, e *readEnv, _ []string) error {
			if at != "" {
				t, _ := time.Parse(time.RFC3339, at) // checked when parsed
				en, err := currentAt(ctx, e.store, e.cfg.Dataset, t)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(e.out, en)
				}
				printCurrentAt(ctx, e, en, t)
				return nil
			}
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
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", en.At.UTC().Format(time.RFC3339), en.Action, en.From, en.To, en.Fence, en.By, en.Reason)
			}
			return tw.Flush()
		}),
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().IntVar(&limit, "limit", 50, "entries to show (0: all)")
	c.Flags().Var(timeFlag(&at), "at", "show the version current at this time (RFC 3339) instead")
	return c
}

// currentAt returns the audit entry that made the dataset's pointer what it was at t.
func currentAt(ctx context.Context, st snapshot.AuditStore, dataset string, t time.Time) (snapshot.AuditEntry, error) {
	if t.After(time.Now()) {
		return snapshot.AuditEntry{}, fmt.Errorf("%w: --at/--to-time %s is in the future", ErrUsage, t.UTC().Format(time.RFC3339))
	}
	return st.AuditAt(ctx, dataset, t)
}

// printCurrentAt says which version was current at t, why, and whether it is still
// there to roll back to.
func printCurrentAt(ctx context.Context, e *readEnv, en snapshot.AuditEntry, t time.Time) {
	fmt.Fprintf(e.out, "at %s the current version was %s\n  since  %s, %s by %s", t.UTC().Format(time.RFC3339), en.To,
		en.At.UTC().Format(time.RFC3339), en.Action, en.By)
	if en.Reason != "" {
		fmt.Fprintf(e.out, " (%s)", en.Reason)
	}
	fmt.Fprintln(e.out)
	m, err := e.store.ReadManifest(ctx, e.cfg.Dataset, en.To)
	if err != nil {
		fmt.Fprintf(e.out, "  now    cannot be read: %v\n", err)
		return
	}
	fmt.Fprintf(e.out, "  now    %s", m.State)
	if ttl := m.TTL; ttl > 0 {
		expires := m.DataTime().Add(ttl)
		verb := "expires"
		if time.Now().After(expires) {
			verb = "expired"
		}
		fmt.Fprintf(e.out, ", %s %s", verb, expires.UTC().Format(time.RFC3339))
	}
	fmt.Fprintln(e.out)
}

// timeFlag is a flag holding an RFC 3339 time, checked when parsed.
func timeFlag(p *string) pflag.Value {
	return checked{p, func(s string) error {
		if _, err := time.Parse(time.RFC3339, s); err != nil {
			return fmt.Errorf("want an RFC 3339 time such as 2026-11-25T10:00:00Z: %v", err)
		}
		return nil
	}, "TIME"}
}
