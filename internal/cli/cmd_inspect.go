package cli

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/snapflip/snapflip/snapshot"
)

// inspectCommand is `syncer inspect VERSION`: a version's manifest in full.
func (m *Syncer) inspectCommand(g *syncerFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect VERSION",
		Short: "Print a version's manifest in full",
		Long: `Inspect prints a version's manifest as JSON: its state, who wrote it and when, the
source LSN, the fencing token, and each collection's count and digest.`,
		Example: `  syncer inspect 7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1767225600000 --config snapflip.yaml`,
		Args:    versionArgs("VERSION"),
		RunE: m.adminRun(g, func(ctx context.Context, e *adminEnv, args []string) error {
			man, err := e.store.ReadManifest(ctx, e.cfg.Dataset, snapshot.Version(args[0]))
			if err != nil {
				return err
			}
			return printJSON(e.out, man)
		}),
	}
}
