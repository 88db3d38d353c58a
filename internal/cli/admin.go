package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/user"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

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

type adminCommand func(ctx context.Context, e *adminEnv, args []string) error

var adminCommands map[string]adminCommand

func init() {
	adminCommands = map[string]adminCommand{
		"versions": cmdVersions,
		"inspect":  cmdInspect,
		"diff":     cmdDiff,
		"rollback": cmdRollback,
		"unpin":    cmdUnpin,
		"history":  cmdHistory,
	}
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

// admin runs an administrative command: no Postgres needed, only Bigtable.
func (m *Syncer) admin(ctx context.Context, cfg SyncerConfig, log *slog.Logger, run adminCommand, args []string) error {
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
	return run(ctx, &adminEnv{cfg: cfg, store: st, admin: adm, out: m.Stdout, by: by}, args)
}

func flags(name string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	return fs
}

func parse(fs *flag.FlagSet, args []string, positional int) ([]string, error) {
	// Flags may come before or after the positional arguments.
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) != positional {
		return nil, fmt.Errorf("%w: %s wants %d argument(s), got %d", ErrUsage, fs.Name(), positional, len(pos))
	}
	return pos, nil
}

func parseVersion(s string) (snapshot.Version, error) {
	v, err := snapshot.ParseVersion(s)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrUsage, err)
	}
	return v, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// versionRow is one line of `syncer versions`.
type versionRow struct {
	Version  snapshot.Version `json:"version"`
	State    snapshot.State   `json:"state"`
	Marks    []string         `json:"marks,omitempty"`
	Started  time.Time        `json:"started_at"`
	Age      string           `json:"age"`
	Counts   map[string]int64 `json:"counts"`
	Source   string           `json:"source_lsn"`
	Token    uint64           `json:"token,omitempty"`
	TTLLeft  string           `json:"ttl_left,omitempty"`
	Reason   string           `json:"reason,omitempty"`
	Complete bool             `json:"complete"`
}

func cmdVersions(ctx context.Context, e *adminEnv, args []string) error {
	fs := flags("versions", e.out)
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	ms, err := e.store.ListManifests(ctx, e.cfg.Dataset)
	if err != nil {
		return err
	}
	ptr, err := e.store.ReadPointer(ctx, e.cfg.Dataset)
	if err != nil && !errors.Is(err, snapshot.ErrNoVersion) {
		return err
	}
	slices.Reverse(ms)
	now := time.Now()
	rows := make([]versionRow, 0, len(ms))
	for _, m := range ms {
		r := versionRow{Version: m.Version, State: m.State, Started: m.StartedAt, Age: now.Sub(m.StartedAt).Round(time.Second).String(),
			Counts: m.Counts(), Source: m.Source.String(), Token: m.Token, Reason: m.Reason, Complete: m.CheckComplete() == nil}
		if exp := m.ExpiresAt(e.cfg.TTL); !exp.IsZero() {
			r.TTLLeft = max(exp.Sub(now), 0).Round(time.Second).String()
		}
		if m.Version == ptr.Version {
			r.Marks = append(r.Marks, "current")
			if ptr.Pinned {
				r.Marks = append(r.Marks, "pinned")
			}
		}
		if m.Version == ptr.Previous && ptr.Previous != "" {
			r.Marks = append(r.Marks, "previous")
		}
		rows = append(rows, r)
	}
	if *asJSON {
		return printJSON(e.out, rows)
	}
	tw := tabwriter.NewWriter(e.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tSTATE\tMARKS\tAGE\tTTL LEFT\tCOUNTS\tSOURCE\tTOKEN")
	for _, r := range rows {
		var counts []string
		for _, n := range slices.Sorted(maps.Keys(r.Counts)) {
			counts = append(counts, fmt.Sprintf("%s=%d", n, r.Counts[n]))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", r.Version, r.State, strings.Join(r.Marks, ","), r.Age, r.TTLLeft,
			strings.Join(counts, " "), r.Source, r.Token)
	}
	return tw.Flush()
}

func cmdInspect(ctx context.Context, e *adminEnv, args []string) error {
	pos, err := parse(flags("inspect", e.out), args, 1)
	if err != nil {
		return err
	}
	v, err := parseVersion(pos[0])
	if err != nil {
		return err
	}
	m, err := e.store.ReadManifest(ctx, e.cfg.Dataset, v)
	if err != nil {
		return err
	}
	return printJSON(e.out, m)
}

func cmdDiff(ctx context.Context, e *adminEnv, args []string) error {
	fs := flags("diff", e.out)
	coll := fs.String("collection", "", "only this collection")
	sample := fs.Int("sample", 10, "ids to list per collection")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args, 2)
	if err != nil {
		return err
	}
	a, err := parseVersion(pos[0])
	if err != nil {
		return err
	}
	b, err := parseVersion(pos[1])
	if err != nil {
		return err
	}
	d, err := snapshot.Diff(ctx, e.store, e.cfg.Dataset, a, b, *coll, *sample)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(e.out, d)
	}
	fmt.Fprintf(e.out, "from %s\nto   %s\n", a, b)
	for _, n := range slices.Sorted(maps.Keys(d)) {
		c := d[n]
		if c.Same {
			fmt.Fprintf(e.out, "%-24s unchanged (same digest)\n", n)
			continue
		}
		fmt.Fprintf(e.out, "%-24s +%d added  -%d removed  ~%d changed\n", n, c.Added, c.Removed, c.Changed)
		for _, s := range c.Sample {
			fmt.Fprintf(e.out, "    %s\n", s)
		}
	}
	return nil
}

func cmdRollback(ctx context.Context, e *adminEnv, args []string) error {
	fs := flags("rollback", e.out)
	to := fs.String("to", "", "the version to roll back to")
	prev := fs.Bool("previous", false, "roll back to the pointer's previous version")
	reason := fs.String("reason", "", "why (required; recorded in the audit trail)")
	force := fs.Bool("force", false, "allow a target that was itself rolled back away from")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	req := snapshot.RollbackRequest{Previous: *prev, Reason: *reason, Force: *force, By: e.by}
	if *to != "" {
		v, err := parseVersion(*to)
		if err != nil {
			return err
		}
		req.To = v
	}
	res, err := e.admin.Rollback(ctx, req)
	if err != nil {
		return fmt.Errorf("%w (nothing changed)", err)
	}
	fmt.Fprintf(e.out, "%s\n  from   %s\n  to     %s\n  token  %d\n  took   %s\nrun `syncer unpin --reason ...` to resume scheduled publishing\n",
		res.Message, res.From, res.To, res.Token, res.Took)
	return nil
}

func cmdUnpin(ctx context.Context, e *adminEnv, args []string) error {
	fs := flags("unpin", e.out)
	reason := fs.String("reason", "", "why (required; recorded in the audit trail)")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	res, err := e.admin.Unpin(ctx, *reason, e.by)
	if err != nil {
		return fmt.Errorf("%w (nothing changed)", err)
	}
	fmt.Fprintln(e.out, res.Message)
	return nil
}

func cmdHistory(ctx context.Context, e *adminEnv, args []string) error {
	fs := flags("history", e.out)
	asJSON := fs.Bool("json", false, "print JSON")
	limit := fs.Int("limit", 50, "entries to show (0: all)")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	entries, err := e.store.ListAudit(ctx, e.cfg.Dataset, *limit)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(e.out, entries)
	}
	tw := tabwriter.NewWriter(e.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WHEN\tACTION\tFROM\tTO\tTOKEN\tBY\tREASON")
	for _, en := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", en.At.UTC().Format(time.RFC3339), en.Action, en.From, en.To, en.Token, en.By, en.Reason)
	}
	return tw.Flush()
}
