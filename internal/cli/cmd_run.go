package cli

import (
	"context"
	"github.com/snapflip/snapflip/internal/syncer"
	"github.com/snapflip/snapflip/layer"
	"github.com/spf13/cobra"
)

// runCommand is `syncer run`: sync on the config's schedule until SIGTERM or SIGINT.
func (m *Syncer) runCommand(g *syncerFlags) *cobra.Command {
	metrics := metricsOptions{maxSync: syncer.DefaultMaxSyncDuration}
	c := &cobra.Command{
		Use:   "run",
		Short: "Sync on the config's schedule until SIGTERM or SIGINT",
		Long: `Run syncs on the config's schedule until SIGTERM or SIGINT. If nothing is published
yet it syncs at once. Every replica runs the schedule and one of them publishes each
tick; a tick that comes while a sync runs is skipped. On SIGTERM it stops scheduling,
cancels the running sync (which leaves the pointer as it was) and exits 0.

With --metrics-addr it also serves GET /healthz (fails when a sync has run longer
than --max-sync-duration) and GET /readyz (fails while Bigtable or Postgres does not
answer, or while this replica's last sync failed).`,
		Example: `  syncer run --config /etc/snapflip/snapflip.yaml --metrics-addr :9090 --log-format json
  SNAPFLIP_CONFIG=snapflip.yaml SNAPFLIP_METRICS_ADDR=:9090 syncer run`,
		Args: positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			s, stop, err := m.start(ctx, g, metrics)
			if err != nil {
				return err
			}
			defer stop()
			// A process that syncs again and again keeps the fingerprint runs it reads:
			// the next delta's parent chain is mostly the same layers.
			if s.layers.Runs == nil {
				s.layers.Runs = layer.NewRunCache(s.Store, layer.DefaultRunCacheBytes)
			}
			// A process that keeps publishing builds the bases a chain's size or age
			// calls for beside the stream, from storage (syncer once writes them in
			// the version that needs one).
			s.layers.Compactor, s.Ticker.Publisher.Bases = s.bases, s.bases
			if s.holdDefinitions {
				// A held or new collection's base is read beside the stream too.
				built := make(chan struct{}, 1)
				s.bases.Source, s.BaseBuilt = s.Source, built
				s.bases.Built = func() {
					select {
					case built <- struct{}{}:
					default:
					}
				}
				if s.parts.Parts != nil {
					// Every replica reads parts of the bases another builds.
					pctx, stopParts := context.WithCancel(ctx)
					partsDone := make(chan struct{})
					go func() { defer close(partsDone); s.parts.Run(pctx) }()
					defer func() { stopParts(); <-partsDone }()
				}
			}
			s.Metrics.ObserveBases(s.bases.Progress)
			s.bases.Start(ctx)
			defer s.bases.Wait()
			return s.Run(ctx)
		},
	}
	metricsFlag(c.Flags(), &metrics)
	c.Flags().DurationVar(&metrics.maxSync, "max-sync-duration", syncer.DefaultMaxSyncDuration,
		"a sync running longer means the syncer is wedged: /healthz on the metrics address fails")
	return c
}
