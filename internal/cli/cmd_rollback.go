package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// rollbackCommand is `syncer rollback`: point back at an earlier version and pin.
func (m *Syncer) rollbackCommand(g *syncerFlags) *cobra.Command {
	var (
		to, reason, toTime string
		previous, force    bool
	)
	c := &cobra.Command{
		Use:   "rollback (--to VERSION | --to-time TIME | --previous) --reason TEXT",
		Short: "Point back at an earlier version and pin the dataset",
		Long: `Rollback takes the publish lease, checks the target (it exists, is complete, has more
than a tenth of its TTL left, is not current, and was not itself rolled back away
from unless --force), flips the pointer to it, marks the abandoned version
rolled_back and pins the dataset: scheduled syncs publish nothing until
"syncer unpin". A refusal explains itself and changes nothing.

A target's TTL left counts with the shorter of its TTL and how long the table's GC
rule keeps documents; a table that keeps them shorter than the config's ttl is
refused outright, naming both. Rollback changes no GC rule.

--to-time TIME rolls back to the version that was current at that moment, as the
audit trail records it ("syncer history --at TIME" shows the choice without acting),
and says which it chose and why; it is refused like --to when that version has
expired or is the current one.`,
		Example: `  syncer rollback --previous --reason "bad import" --config snapflip.yaml
  syncer rollback --to 7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1767225600000 --reason "back to Monday" --force
  syncer rollback --to-time 2026-11-25T10:00:00Z --reason "bad import at 10:05"`,
		Args: positional(),
		RunE: m.adminRun(g, func(ctx context.Context, e *adminEnv, _ []string) error {
			ret, err := e.store.Retention(ctx)
			if err != nil {
				return err
			}
			if ret.Docs.Keep < e.cfg.TTL {
				// The target's expiry is checked against ttl: on a table that keeps
				// documents shorter, a target the check passes may be collected already.
				return fmt.Errorf("rollback: table %s keeps documents %s (family d, GC rule %s), shorter than ttl %s, "+
					"which the check of the target's expiry counts with: set ttl to what this dataset's syncers use, "+
					"or run `%s` (nothing changed): %w",
					ret.Table, store.FormatLife(ret.Docs.Keep), ret.Docs, store.FormatLife(e.cfg.TTL), retentionApply(e.cfg), snapshot.ErrRetention)
			}
			e.admin.Retention = ret.Docs.Keep
			req := snapshot.RollbackRequest{Previous: previous, Reason: reason, Force: force, By: e.by}
			if to != "" {
				req.To = snapshot.Version(to) // checked when parsed
			}
			if toTime != "" {
				if to != "" || previous {
					return fmt.Errorf("%w: --to-time with --to or --previous: give one target", ErrUsage)
				}
				t, _ := time.Parse(time.RFC3339, toTime) // checked when parsed
				en, err := currentAt(ctx, e.store, e.cfg.Dataset, t)
				if err != nil {
					return fmt.Errorf("rollback --to-time: %w (nothing changed)", err)
				}
				req.To = en.To
				fmt.Fprintf(e.out, "chose %s: the version current at %s (%s at %s by %s)\n", en.To,
					t.UTC().Format(time.RFC3339), en.Action, en.At.UTC().Format(time.RFC3339), en.By)
			}
			res, err := e.admin.Rollback(ctx, req)
			if err != nil {
				return fmt.Errorf("%w (nothing changed)", err)
			}
			fmt.Fprintf(e.out, "%s\n  from   %s\n  to     %s\n  token  %d\n  took   %s\nrun `syncer unpin --reason ...` to resume scheduled publishing\n",
				res.Message, res.From, res.To, res.Fence, res.Took)
			return nil
		}),
	}
	c.Flags().Var(checked{&to, func(s string) error {
		_, err := snapshot.ParseVersion(s)
		return err
	}, "VERSION"}, "to", "the version to roll back to")
	c.Flags().BoolVar(&previous, "previous", false, "roll back to the pointer's previous version")
	c.Flags().Var(timeFlag(&toTime), "to-time", "roll back to the version current at this time (RFC 3339), from the audit trail")
	c.Flags().StringVar(&reason, "reason", "", "why (required; recorded in the audit trail)")
	c.Flags().BoolVar(&force, "force", false, "allow a target that was itself rolled back away from")
	return c
}
