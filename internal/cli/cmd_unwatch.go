package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/snapflip/snapflip/pgsource"
)

// unwatchCommand is `syncer unwatch`: remove what watching installed in the source
// database: watch.mode logical's slot and publication, and the retired watch.mode
// notify's triggers.
func (m *Syncer) unwatchCommand(g *syncerFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "unwatch",
		Short: "Remove the replication slot, snapflip's publication and old notify triggers from Postgres",
		Long: `Unwatch removes what watching installed in the config's database.

For ` + "`watch.mode: logical`" + `: it drops the replication slot watch.slot, unless a process
reads from it (a syncer still running: stop it first), and the publication
watch.publication when snapflip created it; a publication a DBA made is kept. A syncer
still configured with watch.mode logical creates them again: set watch.mode to stats
first. The same in SQL:

  SELECT pg_drop_replication_slot('<watch.slot>');
  DROP PUBLICATION IF EXISTS <watch.publication>;

For ` + "`watch.mode: notify`" + `, a mode of older releases: it drops the function
` + pgsource.NotifyFunction + ` and, with it, the trigger ` + pgsource.NotifyTrigger + ` on every
table, whichever config installed it, and the schema ` + pgsource.NotifySchema + ` when nothing else
is in it. That needs the role that installed them (the syncer's), or the function's
owner; ownership of the tables is not needed. Dropping the triggers locks
each table ACCESS EXCLUSIVE until all are dropped, which holds up its readers and
writers: unwatch waits at most 1 s for each table's lock and 5 s in all, and otherwise
removes nothing and says so. Run it again at a quiet time. A syncer of an older release
still running in notify mode installs them again within a minute: stop it first. The
same in SQL:

  DROP FUNCTION IF EXISTS ` + pgsource.NotifyFunction + ` CASCADE;
  DROP SCHEMA IF EXISTS ` + pgsource.NotifySchema + `;

Nothing to remove is not an error.`,
		Example: `  syncer unwatch --config snapflip.yaml`,
		Args:    positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, _, err := m.setupSource(g)
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
