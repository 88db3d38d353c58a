package store_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

func newStore(tb testing.TB) *store.Store {
	tb.Helper()
	return testenv.Store(tb, testenv.StoreConfig(testenv.Bigtable(tb)))
}

// ensureCounting opens a store with cfg, runs EnsureSchema, and returns the
// retention it reports and the admin writes it made, by method.
func ensureCounting(t *testing.T, cfg store.Config) (store.Retention, map[string]int) {
	t.Helper()
	var mu sync.Mutex
	writes := map[string]int{}
	cfg.DialOptions = []grpc.DialOption{grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
		cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if m := method[strings.LastIndexByte(method, '/')+1:]; m == "CreateTable" || m == "ModifyColumnFamilies" {
			mu.Lock()
			writes[m]++
			mu.Unlock()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ret, err := st.EnsureSchema(ctx)
	if err != nil {
		t.Fatalf("ensure schema: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return ret, maps.Clone(writes)
}

// checkRules fails t unless every family of cfg's table has the rule cfg implies.
func checkRules(t *testing.T, cfg store.Config) {
	t.Helper()
	rep, err := testenv.Store(t, cfg).CheckSchema(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Families {
		if f.Have != f.Want {
			t.Errorf("family %s: rule %q; want %q", f.Name, f.Have, f.Want)
		}
	}
}

// TestEnsureSchemaNeverChangesARule: the first EnsureSchema creates the table, its
// families and their rules in one admin write; another, with the same TTL or any
// other, writes nothing and leaves every rule as it was. The retention it reports
// says whether the rules keep cells as long as each TTL needs.
func TestEnsureSchemaNeverChangesARule(t *testing.T) {
	addr := testenv.Bigtable(t)
	table := "schema_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	config := func(ttl time.Duration) store.Config {
		cfg := testenv.StoreConfig(addr)
		cfg.Table, cfg.TTL = table, ttl
		return cfg
	}
	first := config(time.Hour)
	for _, step := range []struct {
		ttl        time.Duration
		want       map[string]int
		short      bool
		longer     int
		shortNames []string
	}{
		{time.Hour, map[string]int{"CreateTable": 1}, false, 0, nil},
		{time.Hour, map[string]int{}, false, 0, nil},
		{2 * time.Hour, map[string]int{}, true, 0, []string{"ttl 2h", "documents 1h", "(age() > 1h || versions() > 1)", "manifests 25h", "age() > 25h"}},
		{30 * time.Minute, map[string]int{}, false, 2, nil},
	} {
		cfg := config(step.ttl)
		ret, got := ensureCounting(t, cfg)
		if !maps.Equal(got, step.want) {
			t.Errorf("EnsureSchema with TTL %s made admin writes %v; want %v", step.ttl, got, step.want)
		}
		checkRules(t, first) // every rule as the table was made, whatever this TTL
		err := ret.Check(cfg)
		if step.short != errors.Is(err, snapshot.ErrRetention) {
			t.Errorf("TTL %s on a table made for 1h: Check = %v; want short %v", step.ttl, err, step.short)
		}
		for _, w := range step.shortNames {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("TTL %s: Check = %v; want it to name %q", step.ttl, err, w)
			}
		}
		if got := len(ret.Longer(cfg)); got != step.longer {
			t.Errorf("TTL %s: %d families keep cells longer than it needs; want %d", step.ttl, got, step.longer)
		}
	}
}

// TestEnsureSchemaMendsFamilies: on a table made elsewhere, with families missing, one
// of another rule and one snapflip does not use, EnsureSchema creates each missing
// family with its rule (one write each) and leaves the families that exist as they
// were; the family that keeps manifests too short is what its retention reports.
func TestEnsureSchemaMendsFamilies(t *testing.T) {
	addr := testenv.Bigtable(t)
	cfg := testenv.StoreConfig(addr)
	cfg.Table = "schema_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	ctx := context.Background()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	admin, err := bigtable.NewAdminClient(ctx, cfg.Project, cfg.Instance, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	other := bigtable.MaxVersionsPolicy(3)
	if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: cfg.Table, Families: map[string]bigtable.GCPolicy{
		"d":     bigtable.UnionPolicy(bigtable.MaxAgePolicy(cfg.TTL), bigtable.MaxVersionsPolicy(1)), // as configured
		"m":     bigtable.MaxAgePolicy(time.Minute),                                                  // another rule
		"extra": other,
	}}); err != nil {
		t.Fatal(err)
	}
	// c, s and h are missing: three creations.
	ret, got := ensureCounting(t, cfg)
	if want := map[string]int{"ModifyColumnFamilies": 3}; !maps.Equal(got, want) {
		t.Errorf("EnsureSchema made admin writes %v; want %v", got, want)
	}
	var short *store.RetentionError
	if err := ret.Check(cfg); !errors.As(err, &short) || len(short.Short) != 1 || short.Short[0].Family != "m" || short.Short[0].Keep != time.Minute {
		t.Errorf("Check = %v; want family m short, keeping 1m", err)
	}
	rep, err := testenv.Store(t, cfg).CheckSchema(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Families {
		want := f.Want
		if f.Name == "m" {
			want = bigtable.MaxAgePolicy(time.Minute).String()
		}
		if f.Have != want {
			t.Errorf("family %s: rule %q; want %q", f.Name, f.Have, want)
		}
	}
	info, err := admin.TableInfo(ctx, cfg.Table)
	if err != nil {
		t.Fatal(err)
	}
	var extra string
	for _, f := range info.FamilyInfos {
		if f.Name == "extra" {
			extra = f.GCPolicy
		}
	}
	if extra != other.String() {
		t.Errorf("family extra: rule %q; want it left %q", extra, other)
	}
	if _, got := ensureCounting(t, cfg); len(got) != 0 {
		t.Errorf("EnsureSchema again made admin writes %v; want none", got)
	}
}

// TestEnsureSchemaRandomConfigs: for random TTLs, grace and retentions (whole days,
// hours, minutes or seconds, which Bigtable's rules print each their own way), a
// table created for a config holds every rule as the config implies it, keeps
// documents and manifests exactly as long as the config needs, and asks for no
// change when the same config plans its retention. Each config has a table of its
// own: EnsureSchema sets rules only when it creates a family.
func TestEnsureSchemaRandomConfigs(t *testing.T) {
	addr := testenv.Bigtable(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	units := []time.Duration{24 * time.Hour, time.Hour, time.Minute, time.Second}
	dur := func(least int) time.Duration { return time.Duration(least+rng.IntN(100)) * units[rng.IntN(len(units))] }
	for range 8 {
		cfg := testenv.StoreConfig(addr)
		cfg.Table = "schema_" + strings.ReplaceAll(uuid.NewString(), "-", "")
		cfg.TTL, cfg.ManifestGrace, cfg.SlotRetention, cfg.AuditRetention = dur(1), dur(0), dur(1), dur(1)
		if cfg.ManifestGrace == 0 || rng.IntN(4) == 0 {
			cfg.ManifestGrace = -1 // no grace (zero takes the default)
		}
		grace := max(cfg.ManifestGrace, 0)
		what := fmt.Sprintf("TTL %s, grace %s, slots %s, audit %s", cfg.TTL, cfg.ManifestGrace, cfg.SlotRetention, cfg.AuditRetention)
		ret, _ := ensureCounting(t, cfg)
		checkRules(t, cfg)
		if ret.Docs.Keep != cfg.TTL || ret.Manifests.Keep != cfg.TTL+grace || ret.Check(cfg) != nil {
			t.Errorf("%s: documents kept %s, manifests %s, Check %v; want exactly the TTL and the TTL plus the grace",
				what, ret.Docs.Keep, ret.Manifests.Keep, ret.Check(cfg))
		}
		if plan := store.PlanRetention(ret, cfg, nil); len(plan.Changes) != 0 {
			t.Errorf("%s: planning the same config changes %+v; want nothing", what, plan.Changes)
		}
		if _, got := ensureCounting(t, cfg); len(got) != 0 {
			t.Fatalf("%s: EnsureSchema again made admin writes %v; want none", what, got)
		}
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*store.Config)
		want   string
	}{
		{"no emulator for local", func(c *store.Config) { c.EmulatorHost = "" }, "BIGTABLE_EMULATOR_HOST"},
		{"ttl", func(c *store.Config) { c.TTL = -time.Second }, "ttl"},
		{"writers", func(c *store.Config) { c.Writers = -1 }, "bigtable.writers"},
		{"audit retention", func(c *store.Config) { c.AuditRetention = -time.Hour }, "audit retention"},
		{"op timeout", func(c *store.Config) { c.OpTimeout = -time.Second }, "bigtable.op_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testenv.StoreConfig("127.0.0.1:1")
			tt.mutate(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, snapshot.ErrInvalid) {
				t.Errorf("Validate() = %v; want an error naming %q, wrapping ErrInvalid", err, tt.want)
			}
		})
	}
}

func version(tb testing.TB) snapshot.Version {
	tb.Helper()
	return snapshot.NewVersionGen(uuid.New(), nil).Next()
}

func TestWriterRoundTripsAwkwardIDs(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	v := version(t)
	ids := []string{"a", "a#b", "a/b", "100%", "%2F", "with space", "ünïcødé", "日本語", "emoji 🎉", "$", "#", "a$b", "..", "x\x00y"}
	w := st.NewWriter(ctx, "ds", v)
	for i, id := range ids {
		if err := w.Write(ctx, "c", snapshot.Document{ID: id, Body: fmt.Appendf(nil, `{"n":%d}`, i)}); err != nil {
			t.Fatalf("Write(%q): %v", id, err)
		}
	}
	counts, err := w.Close(ctx)
	if err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got, want := counts["c"], int64(len(ids)); got != want {
		t.Errorf("written count = %d; want %d", got, want)
	}
	for i, id := range ids {
		got, err := st.GetDocument(ctx, snapshot.ChainRef{Dataset: "ds", Chain: []snapshot.Version{v}, Collection: "c"}, id)
		if err != nil {
			t.Fatalf("GetDocument(%q): %v", id, err)
		}
		if want := fmt.Sprintf(`{"n":%d}`, i); string(got) != want {
			t.Errorf("GetDocument(%q) = %s; want %s", id, got, want)
		}
	}
	if _, err := st.GetDocument(ctx, snapshot.ChainRef{Dataset: "ds", Chain: []snapshot.Version{v}, Collection: "c"}, "missing"); !errors.Is(err, snapshot.ErrNotFound) {
		t.Errorf("GetDocument(missing) error = %v; want ErrNotFound", err)
	}
	// Scanning returns ids in byte order: the key encoding preserves it.
	var scanned []string
	if err := st.ScanDocuments(ctx, snapshot.ChainRef{Dataset: "ds", Chain: []snapshot.Version{v}, Collection: "c"}, func(d snapshot.Document) bool { scanned = append(scanned, d.ID); return true }); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(scanned); i++ {
		if scanned[i-1] >= scanned[i] {
			t.Errorf("scan order: %q before %q", scanned[i-1], scanned[i])
		}
	}
	if len(scanned) != len(ids) {
		t.Errorf("scanned %d ids; want %d", len(scanned), len(ids))
	}
}

// TestWriterManyBatchesInParallel: documents of two collections and run chunks,
// written from several goroutines in many small batches, each batch reused once
// applied, are counted per collection and read back each with its own body.
func TestWriterManyBatchesInParallel(t *testing.T) {
	cfg := testenv.StoreConfig(testenv.Bigtable(t))
	cfg.BatchRows, cfg.Writers = 7, 3
	st := testenv.Store(t, cfg)
	ctx := context.Background()
	v := version(t)
	w := st.NewWriter(ctx, "ds", v)
	const n, parts, perChunk = 1000, 4, 25
	colls := []string{"a", "b"}
	want := map[string]map[string]string{"a": {}, "b": {}}
	for i := range n {
		want[colls[i%2]][fmt.Sprint(i)] = fmt.Sprintf(`{"n":%d}`, i)
	}
	var g errgroup.Group
	for part := range parts {
		g.Go(func() error {
			for i := part; i < n; i += parts {
				coll := colls[i%2]
				if err := w.Write(ctx, coll, snapshot.Document{ID: fmt.Sprint(i), Body: []byte(want[coll][fmt.Sprint(i)])}); err != nil {
					return err
				}
				if i%perChunk == 0 {
					if err := w.WriteChunk(ctx, coll, int64(i/perChunk), []byte{byte(i / perChunk)}); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	counts, err := w.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int64{"a": n / 2, "b": n / 2}, counts); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int64{"a": n / perChunk / 2, "b": n / perChunk / 2}, w.ChunksWritten()); diff != "" {
		t.Errorf("chunks (-want +got):\n%s", diff)
	}
	for _, coll := range colls {
		got := map[string]string{}
		if err := st.ScanDocuments(ctx, snapshot.ChainRef{Dataset: "ds", Chain: []snapshot.Version{v}, Collection: coll}, func(d snapshot.Document) bool {
			got[d.ID] = string(d.Body)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want[coll], got); diff != "" {
			t.Errorf("documents of %s (-want +got):\n%s", coll, diff)
		}
		var chunks, wantChunks []byte
		if err := st.ScanRun(ctx, "ds", v, coll, func(c []byte) bool { chunks = append(chunks, c...); return true }); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i += perChunk {
			if colls[i%2] == coll {
				wantChunks = append(wantChunks, byte(i/perChunk))
			}
		}
		if diff := cmp.Diff(wantChunks, chunks); diff != "" {
			t.Errorf("chunks of %s (-want +got):\n%s", coll, diff)
		}
	}
}

func TestWriterStopsWhenContextEnds(t *testing.T) {
	st := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	w := st.NewWriter(ctx, "ds", version(t))
	cancel()
	var err error
	for i := 0; i < 10_000 && err == nil; i++ {
		err = w.Write(ctx, "c", snapshot.Document{ID: fmt.Sprint(i), Body: []byte(`{}`)})
	}
	if _, cerr := w.Close(ctx); err == nil && cerr == nil {
		t.Fatal("Write and Close after cancel returned no error")
	}
}

func TestManifestTransitions(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	v := version(t)
	m := snapshot.Manifest{Dataset: "ds", Version: v, State: snapshot.StateWriting, StartedAt: time.Now().UTC().Truncate(time.Millisecond), Writer: "w"}
	if err := st.CreateManifest(ctx, m); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateManifest(ctx, m); !errors.Is(err, snapshot.ErrConflict) {
		t.Errorf("second CreateManifest = %v; want ErrConflict", err)
	}
	sealed := m
	sealed.State = snapshot.StateSealed
	// Wrong expected state: nothing changes.
	if err := st.UpdateManifest(ctx, sealed, snapshot.StateSealed); !errors.Is(err, snapshot.ErrConflict) {
		t.Errorf("UpdateManifest from the wrong state = %v; want ErrConflict", err)
	}
	if err := st.UpdateManifest(ctx, sealed, snapshot.StateWriting); err != nil {
		t.Fatalf("seal: %v", err)
	}
	got, err := st.ReadManifest(ctx, "ds", v)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sealed, got); diff != "" {
		t.Errorf("manifest (-want +got):\n%s", diff)
	}
	// A sealed version cannot go back to writing, nor jump to retired.
	back := sealed
	back.State = snapshot.StateRetired
	if err := st.UpdateManifest(ctx, back, snapshot.StateSealed); !errors.Is(err, snapshot.ErrInvalid) {
		t.Errorf("sealed → retired = %v; want ErrInvalid", err)
	}
	if _, err := st.ReadManifest(ctx, "ds", version(t)); !errors.Is(err, snapshot.ErrNotFound) {
		t.Errorf("ReadManifest(unknown) = %v; want ErrNotFound", err)
	}
	list, err := st.ListManifests(ctx, "ds")
	if err != nil || len(list) != 1 || list[0].Version != v {
		t.Errorf("ListManifests = %v, %v; want the one manifest", list, err)
	}
}

func TestFlipPointerConditions(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	gen := snapshot.NewVersionGen(uuid.New(), nil)
	v1, v2, v3 := gen.Next(), gen.Next(), gen.Next()
	at := time.Now().UTC().Truncate(time.Millisecond)

	if _, err := st.ReadPointer(ctx, "ds"); !errors.Is(err, snapshot.ErrNoVersion) {
		t.Fatalf("ReadPointer before any flip = %v; want ErrNoVersion", err)
	}
	p, err := st.FlipPointer(ctx, "ds", snapshot.Flip{Version: v1, Fence: 5, Source: snapshot.Position{LSN: 100}, At: at})
	if err != nil {
		t.Fatalf("first flip: %v", err)
	}
	if p.Version != v1 || p.Fence != 5 {
		t.Errorf("first flip = %+v", p)
	}

	tests := []struct {
		name string
		flip snapshot.Flip
		want error
	}{
		{"expected none but one exists", snapshot.Flip{Version: v2, Fence: 9, Source: snapshot.Position{LSN: 200}}, snapshot.ErrConflict},
		{"older token", snapshot.Flip{Version: v2, Expected: v1, Fence: 4, Source: snapshot.Position{LSN: 200}}, snapshot.ErrFenced},
		{"source goes backwards", snapshot.Flip{Version: v2, Expected: v1, Fence: 6, Source: snapshot.Position{LSN: 99}}, snapshot.ErrSourceBehind},
		{"wrong expected version", snapshot.Flip{Version: v2, Expected: v3, Fence: 6, Source: snapshot.Position{LSN: 200}}, snapshot.ErrConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.flip.At = at
			_, err := st.FlipPointer(ctx, "ds", tt.flip)
			if !errors.Is(err, tt.want) {
				t.Errorf("FlipPointer = %v; want %v", err, tt.want)
			}
			got, err := st.ReadPointer(ctx, "ds")
			if err != nil || got.Version != v1 || got.Fence != 5 {
				t.Errorf("pointer after a rejected flip = %+v, %v; want v1 with fence 5", got, err)
			}
		})
	}

	// A flip with the same source position is allowed (a republish).
	if _, err := st.FlipPointer(ctx, "ds", snapshot.Flip{Version: v2, Expected: v1, Fence: 6, Source: snapshot.Position{LSN: 100}, At: at}); err != nil {
		t.Fatalf("flip at equal source: %v", err)
	}
	// A rollback pins; a scheduled flip is then refused; a rollback may go back in source.
	if _, err := st.FlipPointer(ctx, "ds", snapshot.Flip{Version: v1, Expected: v2, Fence: 7, Source: snapshot.Position{LSN: 100}, Rollback: true, Pin: true, At: at}); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if _, err := st.FlipPointer(ctx, "ds", snapshot.Flip{Version: v3, Expected: v1, Fence: 8, Source: snapshot.Position{LSN: 300}, At: at}); !errors.Is(err, snapshot.ErrPinned) {
		t.Errorf("flip while pinned = %v; want ErrPinned", err)
	}
	got, err := st.ReadPointer(ctx, "ds")
	if err != nil {
		t.Fatal(err)
	}
	want := snapshot.Pointer{Version: v1, Previous: v2, Fence: 7, Source: snapshot.Position{LSN: 100}, Pinned: true, FlippedAt: at,
		Covered: snapshot.Coverage{Version: v1, LSN: 100, At: at}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pointer (-want +got):\n%s", diff)
	}
}

// TestFlipPointerRace: many flips race from one pointer state; exactly one applies.
func TestFlipPointerRace(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	gen := snapshot.NewVersionGen(uuid.New(), nil)
	base := gen.Next()
	if _, err := st.FlipPointer(ctx, "ds", snapshot.Flip{Version: base, Fence: 1, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	const n = 32
	errs := make(chan error, n)
	for i := range n {
		v := gen.Next()
		go func() {
			_, err := st.FlipPointer(ctx, "ds", snapshot.Flip{Version: v, Expected: base, Fence: uint64(2 + i), At: time.Now()})
			errs <- err
		}()
	}
	applied := 0
	for range n {
		err := <-errs
		switch {
		case err == nil:
			applied++
		case errors.Is(err, snapshot.ErrConflict), errors.Is(err, snapshot.ErrFenced):
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	if applied != 1 {
		t.Errorf("%d flips applied from the same expected version; want exactly 1", applied)
	}
}

func TestUnreachableBigtableSaysSo(t *testing.T) {
	st, err := store.Open(context.Background(), testenv.StoreConfig("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, ensureErr := st.EnsureSchema(ctx)
	_, retentionErr := st.Retention(ctx)
	for name, err := range map[string]error{"Ping": st.Ping(ctx), "EnsureSchema": ensureErr, "Retention": retentionErr} {
		if err == nil || !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Errorf("%s against nothing = %v; want an error saying the emulator at 127.0.0.1:1 is unreachable", name, err)
		}
	}
}

// ScanRunFrom reads a run from its chunk from on, and nothing of the runs beside it
// (another collection whose name begins with this one's, another version).
func TestScanRunFrom(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	v, other := version(t), version(t)
	const n = 25
	for _, run := range []struct {
		v    snapshot.Version
		coll string
	}{{v, "a"}, {v, "aa"}, {v, "a#"}, {other, "a"}} {
		w := st.NewWriter(ctx, "ds", run.v)
		for i := range n {
			if err := w.WriteChunk(ctx, run.coll, int64(i), []byte(fmt.Sprintf("%s/%s/%d", run.v, run.coll, i))); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, from := range []int64{0, 1, 10, 24, 25, 100} {
		var got, want []string
		if err := st.ScanRunFrom(ctx, snapshot.RunRef{Dataset: "ds", Layer: v, Collection: "a"}, from, func(c []byte) bool { got = append(got, string(c)); return true }); err != nil {
			t.Fatal(err)
		}
		for i := from; i < n; i++ {
			want = append(want, fmt.Sprintf("%s/a/%d", v, i))
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("from chunk %d (-want +got):\n%s", from, diff)
		}
	}
}
