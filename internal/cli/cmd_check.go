package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/snapflip/snapflip/api"
	"github.com/snapflip/snapflip/auth"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/store"
)

// ErrCheckFailed is syncer check's error when it found problems (exit 1).
var ErrCheckFailed = errors.New("check found problems")

// checkCommand is `syncer check`: the config against the real Postgres and Bigtable,
// before a first sync. It writes nothing.
func (m *Syncer) checkCommand(g *syncerFlags) *cobra.Command {
	var asJSON bool
	var authFile string
	c := &cobra.Command{
		Use:   "check",
		Short: "Check the config against Postgres and Bigtable; write nothing",
		Long: `Check connects to Postgres and Bigtable with the config and reports, without
writing anything or reading a row, whether a sync could succeed:

  per collection: that the table exists or the query is valid, its key columns
  (configured, or inferred from the table's primary key or only unique index) and
  whether Postgres guarantees them unique and not NULL (else the sync checks them as
  it reads), the estimated row count and size; per declared index, its fields, each
  with the Postgres type its values compare as (a missing field, or a type an index
  cannot order such as jsonb, char(n) or an array, is a problem), and its estimated
  size: a row's entry (row key and value, its values as wide as Postgres' statistics
  say) times the estimated rows;

  for Bigtable: that the table exists with the column families and GC rules the config
  implies (a missing table or family is created by the next sync; a rule that keeps
  documents or manifests shorter than the ttl needs is a problem, which "syncer
  retention --apply" mends; a sync never changes an existing rule), and that the app
  profile routes to a single cluster with transactional writes, which the pointer flip,
  leases and the readers' order need (against the emulator, which has no app profiles:
  "not checked (emulator)");

  with watch.mode logical: wal_level, the role's REPLICATION attribute, a free
  replication slot, the publication (which the syncer creates when the role may) and
  a replica identity on every table it publishes; and the slot's state;

  with --auth FILE (the metadata API's auth file): that every collection a row scope
  reads declares an index whose first field is the scope's, which serves the scope.

It exits 0 when a sync could succeed, 1 with every problem named otherwise.`,
		Example: `  syncer check --config snapflip.yaml
  syncer check --config snapflip.yaml --json`,
		Args: positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, _, err := m.setupSource(g)
			if err != nil {
				return err
			}
			rep := runCheck(cmd.Context(), cfg)
			if authFile != "" {
				rep.Problems = append(rep.Problems, checkScopes(authFile, cfg)...)
			}
			if asJSON {
				enc := json.NewEncoder(m.Stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				rep.print(m.Stdout)
			}
			switch n := len(rep.Problems); {
			case n == 1:
				return fmt.Errorf("%w: %s", ErrCheckFailed, rep.Problems[0])
			case n > 1:
				return fmt.Errorf("%w: %d problems, listed above", ErrCheckFailed, n)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	c.Flags().StringVar(&authFile, "auth", "", "also check the metadata API's auth file: every row scope has an index to be served by")
	return c
}

// checkScopes names every collection of cfg a row scope of the auth file reads
// without an index whose first field is the scope's, and an auth file that does not
// load.
func checkScopes(path string, cfg SyncerConfig) []string {
	a, err := auth.Load(path)
	if err != nil {
		return []string{"auth: " + err.Error()}
	}
	indexes := make(map[string][][]string, len(cfg.Collections))
	for _, c := range cfg.Collections {
		indexes[c.Name] = nil
		for _, ix := range c.Indexes {
			indexes[c.Name] = append(indexes[c.Name], ix)
		}
	}
	var problems []string
	for _, u := range a.UnservedScopes(indexes) {
		problems = append(problems, fmt.Sprintf("auth: collection %s is read through a row scope on %s, but declares no index whose first field is %s: add indexes: [[%s, …]]",
			u.Collection, u.Field, u.Field, u.Field))
	}
	return problems
}

// checkReport is what syncer check found.
type checkReport struct {
	Dataset     string                      `json:"dataset"`
	Postgres    string                      `json:"postgres"`
	Collections []pgsource.CollectionReport `json:"collections"`
	Bigtable    *store.SchemaReport         `json:"bigtable,omitempty"`
	// Logical is what watch.mode logical found, in that mode.
	Logical *pgsource.LogicalReport `json:"logical,omitempty"`
	// Problems gathers every problem, each a sentence.
	Problems []string `json:"problems"`
}

// runCheck asks Postgres and Bigtable; a backend it cannot reach is a problem named
// in the report, not an early return, so one run names every problem.
func runCheck(ctx context.Context, cfg SyncerConfig) checkReport {
	rep := checkReport{Dataset: cfg.Dataset, Problems: []string{}}
	ctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	src, err := pgsource.New(cfg.Postgres.DSN, cfg.sources())
	if err == nil {
		rep.Postgres = src.Describe()
		src.RowKeyBytes = func(collection, id string) int { return store.DocumentKeyBytes(cfg.Dataset, collection, id) }
		rep.Collections, err = src.Check(ctx)
	}
	if err != nil {
		rep.Problems = append(rep.Problems, "postgres: "+err.Error())
	}
	for _, c := range rep.Collections {
		rep.Problems = append(rep.Problems, c.Problems...)
	}
	if err == nil && cfg.Watch.logical() {
		var lr pgsource.LogicalReport
		if lr, err = src.CheckLogical(ctx, cfg.logicalConfig()); err != nil {
			rep.Problems = append(rep.Problems, "postgres: check watch.mode logical: "+err.Error())
		} else {
			rep.Logical = &lr
			rep.Problems = append(rep.Problems, lr.Problems...)
		}
	}
	st, err := store.Open(ctx, cfg.StoreConfig())
	if err == nil {
		defer st.Close()
		var r store.SchemaReport
		if r, err = st.CheckSchema(ctx); err == nil {
			rep.Bigtable = &r
			rep.Problems = append(rep.Problems, r.Problems...)
		}
	}
	if err != nil {
		rep.Problems = append(rep.Problems, "bigtable: "+err.Error())
	}
	return rep
}

func (r checkReport) print(w io.Writer) {
	fmt.Fprintf(w, "dataset %s\n", r.Dataset)
	if r.Postgres != "" {
		fmt.Fprintf(w, "postgres %s\n", r.Postgres)
	}
	for _, c := range r.Collections {
		mark := "ok"
		if !c.OK() {
			mark = "PROBLEM"
		}
		fmt.Fprintf(w, "\ncollection %s (%s): %s\n", c.Collection, c.Source, mark)
		if len(c.Key) > 0 {
			how := "configured"
			if c.KeyInferred {
				how = "inferred"
			}
			fmt.Fprintf(w, "  key       %s (%s); %s\n", strings.Join(c.Key, ", "), how, c.KeyGuarantee)
		}
		rows, size := "unknown", "unknown"
		if c.EstimatedRows >= 0 {
			rows = fmt.Sprintf("about %d", c.EstimatedRows)
		}
		if c.SizeBytes >= 0 {
			size = humanBytes(c.SizeBytes)
		}
		fmt.Fprintf(w, "  rows      %s\n  size      %s\n", rows, size)
		for _, ix := range c.Indexes {
			fmt.Fprintf(w, "  index     %s\n", indexText(c, ix))
		}
		for _, p := range c.Problems {
			fmt.Fprintf(w, "  problem   %s\n", p)
		}
	}
	if b := r.Bigtable; b != nil {
		state := "exists"
		if !b.Exists {
			state = "does not exist yet: the first sync creates it"
		}
		fmt.Fprintf(w, "\nbigtable table %s: %s\n", b.Table, state)
		for _, f := range b.Families {
			switch {
			case f.Have == f.Want:
				fmt.Fprintf(w, "  family %s (%s): %s\n", f.Name, f.Holds, f.Want)
			case f.Have == "":
				fmt.Fprintf(w, "  family %s (%s): missing; the next sync creates it with %s\n", f.Name, f.Holds, f.Want)
			case f.Short():
				fmt.Fprintf(w, "  family %s (%s): %s keeps cells %s, shorter than the config's ttl needs (%s): "+
					"a sync refuses to start; syncer retention --apply sets %s\n",
					f.Name, f.Holds, f.Have, store.FormatLife(f.Keep), store.FormatLife(f.Need), f.Want)
			case f.Need > 0 && f.Keep > f.Need:
				fmt.Fprintf(w, "  family %s (%s): %s keeps cells longer than the config needs (%s would do); "+
					"a dataset sharing the table may need it\n", f.Name, f.Holds, f.Have, f.Want)
			default:
				fmt.Fprintf(w, "  family %s (%s): %s; the config implies %s (a sync leaves an existing rule as it is)\n",
					f.Name, f.Holds, f.Have, f.Want)
			}
		}
		fmt.Fprintf(w, "  app profile routing: %s\n", b.Routing)
	}
	if r.Logical != nil {
		printLogical(w, *r.Logical)
	}
	if len(r.Problems) == 0 {
		fmt.Fprintln(w, "\nok: a sync could succeed")
		return
	}
	fmt.Fprintf(w, "\n%d problem(s):\n", len(r.Problems))
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  - %s\n", p)
	}
}

// indexText says what check found of one index: its fields, each with its type, and
// its estimated size, or why it cannot be built.
func indexText(c pgsource.CollectionReport, ix pgsource.IndexReport) string {
	fields := make([]string, len(ix.Fields))
	for i, f := range ix.Fields {
		switch {
		case !c.Exists:
			fields[i] = f.Name
		case !f.Exists:
			fields[i] = f.Name + " (missing)"
		case !f.Indexable:
			fields[i] = f.Name + " " + f.Type + " (cannot be indexed)"
		default:
			fields[i] = f.Name + " " + f.Type
		}
	}
	text := ix.Name + ": " + strings.Join(fields, ", ") + "; "
	switch {
	case !c.Exists:
		return text + "not checked"
	case !ix.OK():
		return text + "cannot be built"
	case ix.EstimatedBytes < 0:
		return text + fmt.Sprintf("size unknown (%s an entry, rows unknown)", humanBytes(int64(ix.EntryBytes)))
	}
	return text + fmt.Sprintf("about %s (%s an entry, one a row)", humanBytes(ix.EstimatedBytes), humanBytes(int64(ix.EntryBytes)))
}

// humanBytes formats n bytes as "12.3 MiB".
func humanBytes(n int64) string { return api.ByteSize(n) }
