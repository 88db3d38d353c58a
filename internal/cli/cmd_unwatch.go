package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/snapflip/snapflip/pgsource"
)

// unwatchCommand is `syncer unwatch`: remove what the retired watch.mode notify
// installed in the source database.
func (m *Syncer) unwatchCommand(g *syncerFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "unwatch",
		Short: "Remove the triggers the retired watch.mode notify installed in Postgres",
		Long: `Unwatch removes what ` + "`watch.mode: notify`" + `, a mode of older releases, installed in the
config's database: the function ` + pgsource.NotifyFunction + ` and, with it, the trigger
` + pgsource.NotifyTrigger + ` on every table, whichever config installed it, and the schema
` + pgsource.NotifySchema + ` when nothing else is in it.
It needs to run as the role that installed them (the syncer's), or as the function's
owner; ownership of the tables is not needed. Nothing installed is not an error.

Dropping the triggers locks each table ACCESS EXCLUSIVE until all are dropped, which
holds up its readers and writers: unwatch waits at most 1 s for each table's lock and
5 s in all, and otherwise removes nothing and says so. Run it again at a quiet time.

A syncer of an older release still running in notify mode installs them again
within a minute: stop it (or set its watch.mode to stats) first. The same in SQL:

  DROP FUNCTION IF EXISTS ` + pgsource.NotifyFunction + ` CASCADE;
  DROP SCHEMA IF EXISTS ` + pgsource.NotifySchema + `;`,
		Example: `  syncer unwatch --config snapflip.yaml`,
		Args:    positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, _, err := m.setup(g)
			if err != nil {
				return err
			}
			src, err := pgsource.New(cfg.Postgres.DSN, cfg.sources())
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), startupTimeout)
			defer cancel()
			tables, found, err := src.RemoveNotify(ctx)
			switch {
			case err != nil:
				return fmt.Errorf("unwatch: %w", err)
			case !found:
				fmt.Fprintf(m.Stdout, "nothing to remove: %s has no %s\n", src.Describe(), pgsource.NotifyFunction)
			case len(tables) == 0:
				fmt.Fprintf(m.Stdout, "removed %s (no table had its trigger)\n", pgsource.NotifyFunction)
			default:
				fmt.Fprintf(m.Stdout, "removed %s and its trigger on %d table(s): %s\n", pgsource.NotifyFunction, len(tables), strings.Join(tables, ", "))
			}
			return unwatchLogical(ctx, m.Stdout, src, cfg)
		},
	}
}
