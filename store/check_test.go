package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/store"
)

// TestCheckSchema: before the first sync the table is reported missing (not a
// problem: the sync creates it); after EnsureSchema every family has the GC rule the
// config implies; a config with a shorter TTL sees the difference and no problem, one
// with a longer TTL a problem naming both; nothing is written.
func TestCheckSchema(t *testing.T) {
	addr := testenv.Bigtable(t)
	ctx := context.Background()
	cfg := testenv.StoreConfig(addr)
	st, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r, err := st.CheckSchema(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Exists || !r.OK() || len(r.Families) != 5 {
		t.Fatalf("before the first sync: %+v; want the table missing, 5 families, no problem", r)
	}
	for _, f := range r.Families {
		if f.Have != "" || f.Want == "" || f.Holds == "" {
			t.Errorf("family %+v before the table exists", f)
		}
	}
	if r2, _ := st.CheckSchema(ctx); r2.Exists {
		t.Fatal("CheckSchema created the table")
	}
	if _, err := st.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err = st.CheckSchema(ctx); err != nil || !r.Exists {
		t.Fatalf("after EnsureSchema: %+v, %v", r, err)
	}
	for _, f := range r.Families {
		if f.Have != f.Want {
			t.Errorf("family %s: have %q; want %q", f.Name, f.Have, f.Want)
		}
	}
	cfg.TTL = 2 * time.Hour
	other, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	r, err = other.CheckSchema(ctx)
	if err != nil {
		t.Fatal(err)
	}
	differ := 0
	for _, f := range r.Families {
		if f.Have != f.Want {
			differ++
		}
	}
	if differ != 2 || !r.OK() { // documents and manifests age by the TTL
		t.Errorf("with another TTL %d families differ (%+v); want d and m, and no problem (the next sync sets them)", differ, r.Families)
	}
	for _, f := range r.Families {
		if f.Short() {
			t.Errorf("with a shorter TTL family %s is short: %+v", f.Name, f)
		}
	}
	cfg.TTL = 200 * time.Hour // longer than the table's 168h keeps documents
	longer, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer longer.Close()
	if r, err = longer.CheckSchema(ctx); err != nil {
		t.Fatal(err)
	}
	var short []string
	for _, f := range r.Families {
		if f.Short() {
			short = append(short, f.Name)
		}
	}
	if len(short) != 2 || len(r.Problems) != 1 || !strings.Contains(r.Problems[0], "ttl 200h") ||
		!strings.Contains(r.Problems[0], "documents 168h") || !strings.Contains(r.Problems[0], "syncer retention --apply") {
		t.Errorf("with a longer TTL: short families %v, problems %q; want d and m, one problem naming the TTL, the rule and the command", short, r.Problems)
	}
	if r.Routing != store.RoutingNotChecked {
		t.Errorf("against the emulator, routing = %q; want %q", r.Routing, store.RoutingNotChecked)
	}
}
