// Package rig is the publisher the protocol's and the layer engine's tests drive: a
// dataset "ds" on a real Postgres database and the Bigtable emulator, with the
// helpers those tests share.
package rig

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// Dataset is the dataset a Rig publishes.
const Dataset = "ds"

// Rig is a publisher writing layers on a real Postgres database and the Bigtable
// emulator.
type Rig struct {
	DSN    string
	Store  *store.Store
	Pub    *snapshot.Publisher
	Writer *layer.Writer // Pub's
}

// New is NewOn on a fresh database of the shared test server.
func New(tb testing.TB, collections []pgsource.Collection, schema ...string) *Rig {
	tb.Helper()
	return NewOn(tb, testenv.Postgres(tb), collections, schema...)
}

// NewOn runs schema on the database at dsn and returns a full-copy publisher of its
// collections into a fresh table.
func NewOn(tb testing.TB, dsn string, collections []pgsource.Collection, schema ...string) *Rig {
	tb.Helper()
	testenv.Exec(tb, dsn, schema...)
	st := testenv.Store(tb, testenv.StoreConfig(testenv.Bigtable(tb)))
	src, err := pgsource.New(dsn, collections)
	if err != nil {
		tb.Fatal(err)
	}
	w := &layer.Writer{Store: st, MaxDocumentBytes: 1 << 20}
	return &Rig{DSN: dsn, Store: st, Writer: w, Pub: &snapshot.Publisher{
		Dataset: Dataset, Store: st, Source: src,
		Versions: snapshot.NewVersionGen(uuid.New(), nil), Writer: "test",
		Data: w,
	}}
}

// Exec runs stmts on the rig's database.
func (r *Rig) Exec(tb testing.TB, stmts ...string) {
	tb.Helper()
	testenv.Exec(tb, r.DSN, stmts...)
}

// Pointer reads the dataset's pointer.
func (r *Rig) Pointer(tb testing.TB) snapshot.Pointer {
	tb.Helper()
	p, err := r.Store.ReadPointer(context.Background(), Dataset)
	if err != nil {
		tb.Fatalf("read pointer: %v", err)
	}
	return p
}

// Published returns the manifest dataset's pointer names.
func (r *Rig) Published(tb testing.TB, dataset string) snapshot.Manifest {
	tb.Helper()
	p, err := r.Store.ReadPointer(context.Background(), dataset)
	if err != nil {
		tb.Fatal(err)
	}
	m, err := r.Store.ReadManifest(context.Background(), dataset, p.Version)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// LastManifest returns the dataset's newest manifest.
func (r *Rig) LastManifest(tb testing.TB) snapshot.Manifest {
	tb.Helper()
	ms := r.manifests(tb)
	if len(ms) == 0 {
		tb.Fatal("no manifest")
	}
	return ms[len(ms)-1]
}

// LastManifestBefore returns the newest manifest older than v.
func (r *Rig) LastManifestBefore(tb testing.TB, v snapshot.Version) snapshot.Manifest {
	tb.Helper()
	ms := r.manifests(tb)
	for i := len(ms) - 1; i > 0; i-- {
		if ms[i].Version == v {
			return ms[i-1]
		}
	}
	tb.Fatalf("no manifest before %s", v)
	return snapshot.Manifest{}
}

func (r *Rig) manifests(tb testing.TB) []snapshot.Manifest {
	tb.Helper()
	ms, err := r.Store.ListManifests(context.Background(), Dataset)
	if err != nil {
		tb.Fatalf("list manifests: %v", err)
	}
	return ms
}

// Publish publishes with p and returns the new manifest; a no-op fails the test.
func (r *Rig) Publish(tb testing.TB, p *snapshot.Publisher) snapshot.Manifest {
	tb.Helper()
	res, err := p.Publish(context.Background(), snapshot.PublishOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	if res.NoOp {
		tb.Fatal("publish was a no-op")
	}
	return res.Manifest
}

// Twin returns a full-copy publisher over the same source and store, of dataset
// "full".
func (r *Rig) Twin() *snapshot.Publisher {
	p := *r.Pub
	p.Dataset, p.Incremental = "full", false
	p.Versions = snapshot.NewVersionGen(uuid.New(), nil)
	return &p
}

// Ticker returns a Ticker of the dataset for holder, whose lease advances the
// pointer's fence when it is taken.
func (r *Rig) Ticker(tb testing.TB, holder string) *snapshot.Ticker {
	tb.Helper()
	lease, err := r.Store.NewLease("publish/"+Dataset, store.LeaseConfig{Holder: holder,
		BeforeAcquire: snapshot.RaiseFence(r.Store, Dataset)})
	if err != nil {
		tb.Fatal(err)
	}
	return &snapshot.Ticker{Publisher: r.Pub, Lease: lease, Ticks: r.Store, Holder: holder}
}

// Stream reads the replication stream of the rig's source, on a new slot, until the
// test ends; it returns once the stream is read.
func (r *Rig) Stream(t *testing.T, slot string) {
	t.Helper()
	src := r.Pub.Source.(*pgsource.Source)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- src.Stream(ctx, pgsource.StreamConfig{LogicalConfig: pgsource.LogicalConfig{Publication: slot, Slot: slot}}, nil, nil)
	}()
	t.Cleanup(func() { testenv.DropSlot(t, r.DSN, slot) })
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Stream: %v", err)
		}
	})
	testenv.Eventually(t, time.Minute, func() error {
		if !src.Streaming() {
			return errors.New("not streaming yet")
		}
		return nil
	})
}

// TwoCollections are the collections of TwoTables: users keyed by its primary key,
// orders by a column that has no constraint.
var TwoCollections = []pgsource.Collection{
	{Name: "users", Table: "users", Key: "id"},
	{Name: "orders", Table: "orders", Key: "id"},
}

// TwoTables is a schema of 50 users and 120 orders.
var TwoTables = []string{
	`CREATE TABLE users (id text PRIMARY KEY, name text)`,
	`CREATE TABLE orders (id int, user_id text)`,
	`INSERT INTO users SELECT 'u' || g, 'name ' || g FROM generate_series(1, 50) g`,
	`INSERT INTO orders SELECT g, 'u' || (g % 50 + 1) FROM generate_series(1, 120) g`,
}
