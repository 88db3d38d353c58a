package layer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/snapflip/snapflip/index"
	"github.com/snapflip/snapflip/internal/storetest"
	"github.com/snapflip/snapflip/internal/testenv/rig"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/resolver"
	"github.com/snapflip/snapflip/snapshot"
)

// TestFilterCacheCarriesAcrossFlips: a resolver whose filter cache lives across flips
// answers every page of every filter, at each new version and at an older one read
// after it, exactly as a resolver with nothing cached does, through random writes
// that mostly leave the indexed field alone (plain deltas), sometimes change it, and
// make merged deltas and bases. Pages cached before a flip that changed no indexed
// value are carried across it, reading no manifest beyond each version's own.
func TestFilterCacheCarriesAcrossFlips(t *testing.T) {
	schema := []string{
		`CREATE TABLE t (id int PRIMARY KEY, n int, note text)`,
		`INSERT INTO t SELECT g, g % 7, 'x' FROM generate_series(1, 200) g`,
	}
	r := rig.New(t, []pgsource.Collection{{Name: "t", Table: "t", Indexes: []pgsource.Columns{{"n"}}}}, schema...)
	r.Pub.Incremental, r.Writer.MaxLayers, r.Writer.RebaseRatio = true, 4, 0.3
	st := storetest.NewCounting(r.Store)
	cached, err := resolver.New("ds", st, resolver.Config{Layers: layer.NewReader(st, "ds")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 7))
	versions := []snapshot.Version{r.Publish(t, r.Pub).Version}
	for step := range 24 {
		id := func() int { return 1 + rnd.IntN(220) }
		var sql []string
		for range 1 + rnd.IntN(4) {
			switch k := rnd.IntN(10); {
			case k < 7: // the indexed field left alone
				sql = append(sql, fmt.Sprintf(`UPDATE t SET note = 'n%d' WHERE id = %d`, step, id()))
			case k < 8:
				sql = append(sql, fmt.Sprintf(`UPDATE t SET n = %d WHERE id = %d`, rnd.IntN(9), id()))
			case k < 9:
				sql = append(sql, fmt.Sprintf(`DELETE FROM t WHERE id = %d`, id()))
			default:
				sql = append(sql, fmt.Sprintf(`INSERT INTO t VALUES (%d, %d, 'new') ON CONFLICT (id) DO NOTHING`, id(), rnd.IntN(9)))
			}
		}
		// Every step changes something, so every step publishes.
		sql = append(sql, fmt.Sprintf(`UPDATE t SET note = 'step %d' WHERE id = (SELECT min(id) FROM t)`, step))
		r.Exec(t, sql...)
		versions = append(versions, r.Publish(t, r.Pub).Version)
		for _, v := range []snapshot.Version{versions[len(versions)-1], versions[rnd.IntN(len(versions))]} {
			fresh, err := resolver.New("ds", r.Store, resolver.Config{CacheSize: -1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			for n := range 9 {
				want := filterAll(t, fresh, v, n)
				if got := filterAll(t, cached, v, n); !slices.Equal(got, want) {
					t.Fatalf("step %d, version %s, n = %d: the cached resolver answered\n%v\nwant\n%v", step, v, n, got, want)
				}
			}
		}
	}
	// Each version's manifest is read once, by its first view: carrying pages walks
	// from the newer version, through manifests already read.
	if n := st.Manifests(); n > int64(len(versions)) {
		t.Errorf("the cached resolver read %d manifests for %d versions; want at most one each", n, len(versions))
	}
	if cached.CarriedFilterHits() == 0 {
		t.Errorf("no filter page was carried across a flip (%d filter hits)", cached.FilterHits())
	}
	t.Logf("%d filter hits, %d of them carried across flips; %d manifests read", cached.FilterHits(), cached.CarriedFilterHits(), st.Manifests())
}

// filterAll reads every page (of 4) of the filter n = eq.<n> at version v and returns
// each document as its id and body.
func filterAll(tb testing.TB, res *resolver.Resolver, v snapshot.Version, n int) []string {
	tb.Helper()
	ctx := context.Background()
	view, err := res.View(ctx, v)
	if err != nil {
		tb.Fatal(err)
	}
	def, err := index.Typed(view.Manifest.Collections["t"].Indexes[0])
	if err != nil {
		tb.Fatal(err)
	}
	scan, err := index.Plan([]index.Def{def}, []index.Cond{{Field: "n", Op: index.OpEq, Values: []string{fmt.Sprint(n)}}})
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	after := ""
	for {
		page, err := res.Filter(ctx, view, resolver.FilterQuery{Collection: "t", Scan: scan, After: after, Limit: 4})
		if err != nil {
			tb.Fatal(err)
		}
		for _, d := range page.Docs {
			out = append(out, d.ID+" "+string(d.Body))
		}
		if after = page.Next; after == "" {
			return out
		}
	}
}
