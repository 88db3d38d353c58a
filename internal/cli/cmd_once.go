package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/snapflip/snapflip/snapshot"
)

// onceCommand is `syncer once`: one sync now.
func (m *Syncer) onceCommand(g *syncerFlags) *cobra.Command {
	var (
		force   bool
		metrics metricsOptions
	)
	c := &cobra.Command{
		Use:   "once",
		Short: "Run one sync now",
		Long: `Once runs one sync now: it reads every configured collection in one consistent
Postgres snapshot, writes them into Bigtable under a fresh version, and flips the
pointer to it. It exits 0 when it published, or when the source had not changed since
the current version (it prints "unchanged: ..."), and 1 when the sync failed or a
validation gate refused it, with the reason; the pointer is then left as it was.`,
		Example: `  syncer once --config snapflip.yaml
  SNAPFLIP_CONFIG=snapflip.yaml syncer once --force --log-level debug`,
		Args: positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			s, stop, err := m.start(ctx, g, metrics)
			if err != nil {
				return err
			}
			defer stop()
			res, token, err := s.PublishNow(ctx, snapshot.PublishOptions{Force: force})
			if err != nil {
				return fmt.Errorf("sync: %w", err)
			}
			m.report(res, token)
			return nil
		},
	}
	c.Flags().BoolVar(&force, "force", false, "publish even if the source has not changed, and skip the validation gates")
	metricsFlag(c.Flags(), &metrics)
	return c
}
