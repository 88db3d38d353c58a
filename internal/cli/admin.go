package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/user"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// adminEnv is what the administrative commands work with.
type adminEnv struct {
	cfg   SyncerConfig
	store *store.Store
	admin *snapshot.Admin
	out   io.Writer
	by    string
}

// operator names the person running the CLI: user@host.
func operator() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

// newAdmin builds the rollback/unpin logic on a store, under the dataset's lease.
func newAdmin(st *store.Store, dataset string, ttl, leaseDuration time.Duration, holder string, log *slog.Logger) (*snapshot.Admin, error) {
	lease, err := st.NewLease(leaseName(dataset), store.LeaseConfig{
		Holder:        holder,
		Duration:      leaseDuration,
		BeforeAcquire: func(ctx context.Context, token uint64) error { return st.AdvanceFence(ctx, dataset, token) },
	})
	if err != nil {
		return nil, err
	}
	return &snapshot.Admin{Dataset: dataset, Store: st, Lease: lease, TTL: ttl, Log: log}, nil
}

// adminRun returns the RunE of an administrative command: it loads the config, opens
// Bigtable (no Postgres needed) and runs fn with the command's arguments.
func (m *Syncer) adminRun(g *syncerFlags, fn func(ctx context.Context, e *adminEnv, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		cfg, log, err := m.setup(g)
		if err != nil {
			return err
		}
		sctx, cancel := context.WithTimeout(ctx, startupTimeout)
		defer cancel()
		st, err := store.Open(sctx, cfg.StoreConfig())
		if err != nil {
			return err
		}
		defer st.Close()
		if err := st.EnsureSchema(sctx); err != nil {
			return err
		}
		by := operator()
		adm, err := newAdmin(st, cfg.Dataset, cfg.TTL, cfg.Lease.Duration, "cli/"+by+"/"+uuid.NewString(), log)
		if err != nil {
			return err
		}
		adm.Crash = crashHook(m.Getenv)
		return fn(ctx, &adminEnv{cfg: cfg, store: st, admin: adm, out: m.Stdout, by: by}, args)
	}
}

// versionArgs returns an argument check that wants exactly the named arguments, each a
// version.
func versionArgs(names ...string) cobra.PositionalArgs {
	count := positional(names...)
	return func(cmd *cobra.Command, args []string) error {
		if err := count(cmd, args); err != nil {
			return err
		}
		for _, a := range args {
			if _, err := snapshot.ParseVersion(a); err != nil {
				return usageErrorf(cmd, "%v", err)
			}
		}
		return nil
	}
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
