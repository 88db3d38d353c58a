package pgsource_test

import (
	"strings"
	"testing"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/pgsource"
)

func TestTableNames(t *testing.T) {
	for _, tt := range []struct{ table, err string }{
		{"t", ""},
		{"public.t", ""},
		{"Mixed Case.with space", ""},
		{`a"b`, ""},
		{`public."a.b"`, ""},
		{`"s.x"."a.b"`, ""},
		{`"say ""hi"""`, ""},
		{`"".t`, "empty name"},
		{"a.b.c", "more than two"},
		{`"a.b`, "no closing quote"},
		{`"a"b`, "other than a dot"},
		{"a.", "empty name"},
		{".a", "empty name"},
		{`"a".`, "empty name"},
	} {
		err := pgsource.ValidateCollections([]pgsource.Collection{{Name: "c", Table: tt.table, Key: "k"}})
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("table %q: %v; want it valid", tt.table, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "collections[0].table")):
			t.Errorf("table %q: %v; want an error naming collections[0].table and saying %q", tt.table, err, tt.err)
		}
	}
}

// TestTableNamesWithDots: a table and a schema whose names hold dots and quotes are
// read when the config quotes them (found by the generative test in e2e).
func TestTableNamesWithDots(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE SCHEMA "s.x"`, `CREATE TABLE "s.x"."a.""b" ("k.k" text PRIMARY KEY, v int)`,
		`INSERT INTO "s.x"."a.""b" VALUES ('one', 1)`, `CREATE TABLE ".." (k int PRIMARY KEY)`, `INSERT INTO ".." VALUES (7)`)
	src, err := pgsource.New(dsn, []pgsource.Collection{
		{Name: "dotted", Table: `"s.x"."a.""b"`, Key: "k.k"}, {Name: "dots", Table: `public.".."`, Key: "k"}})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"dotted": `{"k.k":"one","v":1}`, "dots": `{"k":7}`} {
		docs, pos, err := scanAll(t, src, name)
		if err != nil || len(docs) != 1 || string(docs[0].Body) != want {
			t.Errorf("%s = %v, %v; want one document %s", name, docs, err, want)
		}
		if pos.Fingerprints[name] == "" {
			t.Errorf("%s has no fingerprint: the table was not found as a table", name)
		}
	}
}

// Validate names the field of a bad value; a zero value takes its default.
func TestWatchAndStreamConfigValidate(t *testing.T) {
	logical := pgsource.LogicalConfig{Publication: "p", Slot: "s"}
	for _, tt := range []struct {
		name string
		got  error
		want string // "" for no error
	}{
		{"watch zero", pgsource.WatchConfig{}.Validate(), ""},
		{"watch defaults", pgsource.DefaultWatchConfig().Validate(), ""},
		{"watch interval", pgsource.WatchConfig{Interval: -1}.Validate(), "WatchConfig.Interval"},
		{"watch hot", pgsource.WatchConfig{Hot: -1}.Validate(), "WatchConfig.Hot"},
		{"watch resolve", pgsource.WatchConfig{Resolve: -1}.Validate(), "WatchConfig.Resolve"},
		{"watch mode", pgsource.WatchConfig{Mode: 7}.Validate(), "WatchConfig.Mode 7"},
		{"watch mode text", second(pgsource.ParseWatchMode("notify")), `watch mode "notify": must be "stats" or "logical"`},
		{"stream zero", pgsource.StreamConfig{LogicalConfig: logical}.Validate(), ""},
		{"stream publication", pgsource.StreamConfig{LogicalConfig: pgsource.LogicalConfig{Slot: "s"}}.Validate(), "LogicalConfig.Publication"},
		{"stream slot", pgsource.StreamConfig{LogicalConfig: pgsource.LogicalConfig{Publication: "p"}}.Validate(), "LogicalConfig.Slot"},
		{"stream catch-up", pgsource.StreamConfig{LogicalConfig: logical, CatchUp: -1}.Validate(), "StreamConfig.CatchUp"},
		{"stream retained", pgsource.StreamConfig{LogicalConfig: logical, WarnRetained: -1}.Validate(), "StreamConfig.WarnRetained"},
		{"stream nudge", pgsource.StreamConfig{LogicalConfig: logical, NudgeAfter: -1}.Validate(), "StreamConfig.NudgeAfter"},
	} {
		switch {
		case tt.want == "" && tt.got != nil:
			t.Errorf("%s: Validate = %v; want nil", tt.name, tt.got)
		case tt.want != "" && (tt.got == nil || !strings.Contains(tt.got.Error(), tt.want)):
			t.Errorf("%s: Validate = %v; want an error naming %s", tt.name, tt.got, tt.want)
		}
	}
}

// second returns a call's error, for a table of errors.
func second[T any](_ T, err error) error { return err }
