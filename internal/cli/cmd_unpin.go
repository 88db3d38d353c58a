package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

// unpinCommand is `syncer unpin`: resume scheduled publishing after a rollback.
func (m *Syncer) unpinCommand(g *syncerFlags) *cobra.Command {
	var reason string
	c := &cobra.Command{
		Use:   "unpin --reason TEXT",
		Short: "Resume scheduled publishing after a rollback",
		Long: `Unpin lifts the pin a rollback set: the next scheduled sync publishes again. It
changes nothing else, and is recorded in the audit trail.`,
		Example: `  syncer unpin --reason "fixed upstream" --config snapflip.yaml`,
		Args:    positional(),
		RunE: m.adminRun(g, func(ctx context.Context, e *adminEnv, _ []string) error {
			res, err := e.admin.Unpin(ctx, reason, e.by)
			if err != nil {
				return fmt.Errorf("%w (nothing changed)", err)
			}
			fmt.Fprintln(e.out, res.Message)
			return nil
		}),
	}
	c.Flags().StringVar(&reason, "reason", "", "why (required; recorded in the audit trail)")
	return c
}
