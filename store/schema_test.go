package store_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// rule is a family's rule as Retention reports it.
func rule(family string, p bigtable.GCPolicy) store.FamilyRule {
	return store.FamilyRule{Family: family, Rule: p, Keep: store.MinLife(p)}
}

// docsRule is the documents' rule for ttl, as snapflip makes it.
func docsRule(ttl time.Duration) bigtable.GCPolicy {
	return bigtable.UnionPolicy(bigtable.MaxAgePolicy(ttl), bigtable.MaxVersionsPolicy(1))
}

// TestPlanRetention: the plan sets the rules a config asks for documents and
// manifests where they differ, and is refused by every dataset sharing the table
// whose current version a new rule would collect too early: one written with a
// longer TTL, or one whose oldest layer has less than a tenth of its TTL left under
// the new rule.
func TestPlanRetention(t *testing.T) {
	const day = 24 * time.Hour
	cfg := func(ttl time.Duration) store.Config {
		c := store.DefaultConfig()
		c.TTL = ttl
		return c
	}
	table := func(ttl time.Duration) store.Retention {
		return store.Retention{Table: "t", Docs: rule("d", docsRule(ttl)), Manifests: rule("m", bigtable.MaxAgePolicy(ttl+day))}
	}
	need := func(dataset string, ttl, age time.Duration) snapshot.RetentionNeed {
		return snapshot.RetentionNeed{Dataset: dataset, Version: snapshot.Version(dataset + "-v"), TTL: ttl, Age: age}
	}
	type change struct{ Family, From, To string }
	type refusal struct{ Family, Dataset string }
	for _, tt := range []struct {
		name         string
		have         store.Retention
		cfg          store.Config
		needs        []snapshot.RetentionNeed
		wantChanges  []change
		wantRefusals []refusal
	}{
		{"as configured", table(time.Hour), cfg(time.Hour), []snapshot.RetentionNeed{need("a", 5*day, 0)}, nil, nil},
		{"longer", table(time.Hour), cfg(2 * time.Hour), []snapshot.RetentionNeed{need("a", time.Hour, 10*time.Minute), need("b", 2*time.Hour, time.Minute)},
			[]change{{"d", "(age() > 1h || versions() > 1)", "(age() > 2h || versions() > 1)"}, {"m", "age() > 25h", "age() > 26h"}}, nil},
		{"shorter than another dataset's ttl", table(2 * time.Hour), cfg(time.Hour), []snapshot.RetentionNeed{need("a", time.Hour, 0), need("b", 2*time.Hour, 0)},
			[]change{{"d", "(age() > 2h || versions() > 1)", "(age() > 1h || versions() > 1)"}, {"m", "age() > 26h", "age() > 25h"}},
			[]refusal{{"d", "b"}}},
		{"shorter than its own current version's ttl", table(7 * day), cfg(day), []snapshot.RetentionNeed{need("a", 7*day, time.Hour)},
			[]change{{"d", "(age() > 7d || versions() > 1)", "(age() > 1d || versions() > 1)"}, {"m", "age() > 8d", "age() > 2d"}},
			[]refusal{{"d", "a"}, {"m", "a"}}},
		{"would collect an old layer", table(7 * day), cfg(day), []snapshot.RetentionNeed{need("a", day, 22*time.Hour)},
			[]change{{"d", "(age() > 7d || versions() > 1)", "(age() > 1d || versions() > 1)"}, {"m", "age() > 8d", "age() > 2d"}},
			[]refusal{{"d", "a"}}},
		{"an old layer within the margin of manifests too", table(7 * day), cfg(time.Hour), []snapshot.RetentionNeed{need("a", time.Hour, 30*time.Hour)},
			[]change{{"d", "(age() > 7d || versions() > 1)", "(age() > 1h || versions() > 1)"}, {"m", "age() > 8d", "age() > 25h"}},
			[]refusal{{"d", "a"}, {"m", "a"}}},
		{"missing family", store.Retention{Table: "t", Docs: rule("d", docsRule(time.Hour)), Manifests: store.FamilyRule{Family: "m"}}, cfg(time.Hour), nil,
			[]change{{"m", "missing", "age() > 25h"}}, nil},
		{"an operator's rule", store.Retention{Table: "t", Docs: rule("d", bigtable.MaxVersionsPolicy(1)), Manifests: rule("m", bigtable.NoGcPolicy())}, cfg(time.Hour),
			[]snapshot.RetentionNeed{need("a", time.Hour, 0)},
			[]change{{"d", "versions() > 1", "(age() > 1h || versions() > 1)"}, {"m", "no rule", "age() > 25h"}}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			plan := store.PlanRetention(tt.have, tt.cfg, tt.needs)
			var changes []change
			for _, c := range plan.Changes {
				changes = append(changes, change{c.From.Family, c.From.String(), c.To.String()})
			}
			var refusals []refusal
			for _, r := range plan.Refusals {
				refusals = append(refusals, refusal{r.Family, r.Need.Dataset})
				if s := r.String(); !strings.Contains(s, "dataset "+r.Need.Dataset) || !strings.Contains(s, string(r.Need.Version)) {
					t.Errorf("refusal %q names neither the dataset nor its version", s)
				}
			}
			if diff := cmp.Diff(tt.wantChanges, changes); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantRefusals, refusals); diff != "" {
				t.Errorf("refusals (-want +got):\n%s", diff)
			}
		})
	}
}

// TestApplyRetention: applying a plan sets the rules it names and nothing else, after
// which the table keeps cells as the new config needs; a plan with a refusal changes
// nothing. ListPointers finds every dataset that published, and no other.
func TestApplyRetention(t *testing.T) {
	addr := testenv.Bigtable(t)
	cfg := testenv.StoreConfig(addr)
	cfg.Table, cfg.TTL = "retention_"+strings.ReplaceAll(uuid.NewString(), "-", ""), time.Hour
	st := testenv.Store(t, cfg)
	ctx := context.Background()
	for i, ds := range []string{"a", "b#with$awkward"} {
		if _, err := st.FlipPointer(ctx, ds, snapshot.Flip{Version: version(t), Fence: uint64(i + 1), At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.AdvanceFence(ctx, "fenced-only", 3); err != nil {
		t.Fatal(err)
	}
	ptrs, err := st.ListPointers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for ds := range ptrs {
		names = append(names, ds)
	}
	slices.Sort(names)
	if want := []string{"a", "b#with$awkward"}; !slices.Equal(names, want) {
		t.Errorf("ListPointers = %v; want %v", names, want)
	}

	longer := cfg
	longer.TTL = 3 * time.Hour
	ret, err := st.Retention(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ret.Check(longer); !errors.Is(err, snapshot.ErrRetention) {
		t.Fatalf("before: Check(3h) = %v; want short", err)
	}
	refused := store.PlanRetention(ret, longer, []snapshot.RetentionNeed{{Dataset: "x", TTL: 5 * time.Hour}})
	if err := testenv.Store(t, longer).ApplyRetention(ctx, refused); !errors.Is(err, snapshot.ErrRetention) || !strings.Contains(err.Error(), "dataset x") {
		t.Errorf("applying a refused plan = %v; want refused naming dataset x", err)
	}
	if after, _ := st.Retention(ctx); after.Docs.Keep != time.Hour {
		t.Errorf("after a refused plan documents are kept %s; want the 1h they were", after.Docs.Keep)
	}
	plan := store.PlanRetention(ret, longer, nil)
	if err := testenv.Store(t, longer).ApplyRetention(ctx, plan); err != nil {
		t.Fatal(err)
	}
	after, err := st.Retention(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Check(longer) != nil || after.Docs.Keep != 3*time.Hour || after.Manifests.Keep != 27*time.Hour {
		t.Errorf("after applying: documents %s, manifests %s; want 3h and 27h", after.Docs, after.Manifests)
	}
	checkRules(t, longer)
}
