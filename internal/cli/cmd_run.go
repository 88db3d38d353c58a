package cli

import (
	"github.com/spf13/cobra"
)

// runCommand is `syncer run`: sync on the config's schedule until SIGTERM or SIGINT.
func (m *Syncer) runCommand(g *syncerFlags) *cobra.Command {
	var metricsAddr string
	c := &cobra.Command{
		Use:   "run",
		Short: "Sync on the config's schedule until SIGTERM or SIGINT",
		Long: `Run syncs on the config's schedule until SIGTERM or SIGINT. If nothing is published
yet it syncs at once. Every replica runs the schedule and one of them publishes each
tick; a tick that comes while a sync runs is skipped. On SIGTERM it stops scheduling,
cancels the running sync (which leaves the pointer as it was) and exits 0.`,
		Example: `  syncer run --config /etc/snapflip/snapflip.yaml --metrics-addr :9090 --log-format json
  SNAPFLIP_CONFIG=snapflip.yaml SNAPFLIP_METRICS_ADDR=:9090 syncer run`,
		Args: positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			cfg, log, err := m.setup(g)
			if err != nil {
				return err
			}
			s, err := wireSyncer(ctx, cfg, log)
			if err != nil {
				return err
			}
			s.ticker.Publisher.Crash = crashHook(m.Getenv)
			defer s.store.Close()
			stopMetrics, err := serveMetrics(ctx, metricsAddr, s.metrics.reg, log)
			if err != nil {
				return err
			}
			defer stopMetrics()
			return m.runSchedule(ctx, s)
		},
	}
	metricsFlag(c.Flags(), &metricsAddr)
	return c
}
