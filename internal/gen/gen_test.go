package gen_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snapflip/snapflip/internal/gen"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/pgsource"
)

// history returns everything a seed generates: the schema's statements, its first
// rows, steps (with fixed keys), and the collections.
func history(seed uint64) []string {
	g := gen.New(seed)
	s := g.Schema(gen.Options{})
	out := append(s.Create(), g.Fill(s)...)
	for range 3 {
		out = append(out, g.Step(s, func(*gen.Table) []string { return []string{"a", "b"} })...)
	}
	for _, c := range s.Collections() {
		out = append(out, fmt.Sprintf("%+v", c))
	}
	return out
}

func TestSeedReplays(t *testing.T) {
	for seed := range uint64(20) {
		if diff := cmp.Diff(history(seed), history(seed)); diff != "" {
			t.Fatalf("seed %d generated two histories (-first +second):\n%s", seed, diff)
		}
	}
	if slices.Equal(history(1), history(2)) {
		t.Error("seeds 1 and 2 generated the same history")
	}
}

func TestCollectionsAreValid(t *testing.T) {
	for seed := range uint64(200) {
		s := gen.New(seed).Schema(gen.Options{})
		cs := s.Collections()
		if err := pgsource.ValidateCollections(cs); err != nil {
			t.Errorf("seed %d: %v", seed, err)
		}
		for _, c := range cs {
			if !utf8.ValidString(c.Key) || c.Key == "" || len(c.Key) > 63 {
				t.Errorf("seed %d: collection %s has key %q", seed, c.Name, c.Key)
			}
		}
	}
}

func TestRef(t *testing.T) {
	for _, tt := range []struct {
		schema, name string
		quoted       bool
		want         string
	}{
		{"", "t", false, "t"},
		{"", "a.b", false, `"a.b"`},
		{"s", `"x`, false, `s."""x"`},
		{"s.x", "t", false, `"s.x".t`},
		{"s", `a"b`, true, `"s"."a""b"`},
	} {
		if got := gen.Ref(tt.schema, tt.name, tt.quoted); got != tt.want {
			t.Errorf("Ref(%q, %q, %t) = %s; want %s", tt.schema, tt.name, tt.quoted, got, tt.want)
		}
	}
}

// TestStatementsRunInPostgres runs what many seeds generate against Postgres: every
// statement succeeds (a key change may hit a taken key), every key is a valid id, every
// collection's query and Postgres' to_jsonb of it work, and every row rebuilt from its
// text forms (what a failure's minimal reproducer prints) is the same row.
func TestStatementsRunInPostgres(t *testing.T) {
	ctx := context.Background()
	for seed := range uint64(25) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			conn, err := pgx.Connect(ctx, testenv.Postgres(t))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			exec := func(stmt string) error {
				_, err := conn.Exec(ctx, stmt, pgx.QueryExecModeSimpleProtocol)
				return err
			}
			if err := exec("SET timezone = 'UTC'"); err != nil {
				t.Fatal(err)
			}
			g := gen.New(seed)
			opt := gen.Options{Rows: 30}
			if seed%2 == 1 {
				opt.TypeChanges, opt.SettingChanges, opt.NondeterministicKeys, opt.PartitionedNullKeys, opt.CommentAfterSemicolon =
					true, true, true, true, true
			}
			s := g.Schema(opt)
			for _, stmt := range append(s.Create(), g.Fill(s)...) {
				if err := exec(stmt); err != nil {
					t.Fatalf("%v\n%.2000s", err, stmt)
				}
			}
			keys := func(tb *gen.Table) []string {
				rows, err := conn.Query(ctx, "SELECT coalesce(("+gen.Ident(tb.Key.Name)+")::text, '') FROM "+tb.Ident())
				if err != nil {
					t.Fatal(err)
				}
				ks, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range ks {
					if k == "" || len(k) > gen.MaxIDBytes || !utf8.ValidString(k) {
						t.Errorf("table %s has the key %q, not a valid id, after Repair", tb.Ident(), k)
					}
				}
				return ks
			}
			for range 3 {
				for _, stmt := range g.Step(s, keys) {
					var pe *pgconn.PgError
					if err := exec(stmt); err != nil && !(errors.As(err, &pe) && pe.Code == "23505") {
						t.Fatalf("%v\n%.2000s", err, stmt)
					}
				}
				for _, stmt := range s.Repair() {
					if err := exec(stmt); err != nil {
						t.Fatalf("%v\n%s", err, stmt)
					}
				}
			}
			for _, q := range s.Queries {
				var n int
				if err := conn.QueryRow(ctx, "SELECT count(to_jsonb(x.*)) FROM ("+q.Plain+") AS x").Scan(&n); err != nil {
					t.Errorf("query of %s: %v\n%s", q.Collection, err, q.Plain)
				}
			}
			for _, tb := range s.Tables {
				roundTrip(t, conn, tb)
			}
		})
	}
}

// roundTrip rebuilds every row of tb, alone in the table, from the text forms of its
// values, and compares to_jsonb of the two. It leaves tb with one row.
func roundTrip(t *testing.T, conn *pgx.Conn, tb *gen.Table) {
	t.Helper()
	ctx := context.Background()
	cols := []string{"(" + gen.Ident(tb.Key.Name) + ")::text"}
	for _, c := range tb.Cols {
		cols = append(cols, "("+gen.Ident(c.Name)+")::text")
	}
	rows, err := conn.Query(ctx, "SELECT "+strings.Join(cols, ", ")+", to_jsonb(x.*)::text FROM "+tb.Ident()+" AS x")
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		vals []*string
		doc  string
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var out row
		out.vals = make([]*string, len(cols))
		ptrs := make([]any, len(cols)+1)
		for i := range out.vals {
			ptrs[i] = &out.vals[i]
		}
		ptrs[len(cols)] = &out.doc
		return out, r.Scan(ptrs...)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		if _, err := conn.Exec(ctx, "DELETE FROM "+tb.Ident()); err != nil {
			t.Fatal(err)
		}
		ins := tb.InsertText(r.vals)
		if _, err := conn.Exec(ctx, ins, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Errorf("the row's text forms do not insert: %v\n%.2000s", err, ins)
			continue
		}
		var doc string
		var same bool
		if err := conn.QueryRow(ctx, "SELECT to_jsonb(x.*)::text, to_jsonb(x.*) = $1::jsonb FROM "+tb.Ident()+" AS x", r.doc).Scan(&doc, &same); err != nil {
			t.Fatal(err)
		}
		if !same {
			t.Errorf("rebuilt from text, a row of %s is\n%s\nwas\n%s", tb.Ident(), doc, r.doc)
		}
	}
}
