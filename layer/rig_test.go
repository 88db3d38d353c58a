package layer_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// rig is a publisher writing layers on a real Postgres database and an in-process
// Bigtable.
type rig struct {
	dsn   string
	store *store.Store
	pub   *snapshot.Publisher
	w     *layer.Writer // pub's
}

func newRig(tb testing.TB, collections []pgsource.Collection, schema ...string) *rig {
	tb.Helper()
	return newRigOn(tb, testenv.Postgres(tb), collections, schema...)
}

// newRigOn is newRig on the database at dsn.
func newRigOn(tb testing.TB, dsn string, collections []pgsource.Collection, schema ...string) *rig {
	tb.Helper()
	testenv.Exec(tb, dsn, schema...)
	st := testenv.Store(tb, testenv.StoreConfig(testenv.Bigtable(tb)))
	src, err := pgsource.New(dsn, collections)
	if err != nil {
		tb.Fatal(err)
	}
	w := &layer.Writer{Store: st, MaxDocumentBytes: 1 << 20}
	return &rig{dsn: dsn, store: st, w: w, pub: &snapshot.Publisher{
		Dataset: "ds", Store: st, Source: src,
		Versions: snapshot.NewVersionGen(uuid.New(), nil), Writer: "test",
		Data: w,
	}}
}

// withWriter returns a copy of p writing with a copy of w that change made.
func withWriter(p *snapshot.Publisher, w *layer.Writer, change func(*layer.Writer)) *snapshot.Publisher {
	wc, pc := *w, *p
	change(&wc)
	pc.Data = &wc
	return &pc
}

var twoCollections = []pgsource.Collection{
	{Name: "users", Table: "users", Key: "id"},
	{Name: "orders", Table: "orders", Key: "id"},
}

var twoTables = []string{
	`CREATE TABLE users (id text PRIMARY KEY, name text)`,
	`CREATE TABLE orders (id int, user_id text)`,
	`INSERT INTO users SELECT 'u' || g, 'name ' || g FROM generate_series(1, 50) g`,
	`INSERT INTO orders SELECT g, 'u' || (g % 50 + 1) FROM generate_series(1, 120) g`,
}
