package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/store"
)

// TestCheckSchema: before the first sync the table is reported missing (not a
// problem: the sync creates it); after EnsureSchema every family has the GC rule the
// config implies; a config with another TTL sees the difference; nothing is written.
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
	if err := st.EnsureSchema(ctx); err != nil {
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
	if r.Routing == "" {
		t.Error("the report says nothing of the app profile's routing")
	}
}
