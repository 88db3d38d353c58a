package pgtoken_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/client"
	"github.com/snapflip/snapflip/pgtoken"
)

// A service writes a tenant, then reads it back through the metadata API: the read
// waits for a version that holds the write. (Compiled, not run: it needs a database
// and an API.)
func Example() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, "postgres://app@db:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	c, err := client.New("http://metadata-api:8080", client.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}

	tx, err := conn.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op once committed
	if _, err := tx.Exec(ctx, `UPDATE tenants SET plan = 'pro' WHERE id = $1`, "acme"); err != nil {
		log.Fatal(err)
	}
	tok, err := pgtoken.FromTx(ctx, tx)
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}

	doc, err := c.Get(ctx, "tenants", "acme", client.After(tok))
	if err != nil {
		log.Fatal(err) // errors.Is(err, client.ErrNotYetCovered): no sync published it within the wait
	}
	log.Printf("acme from version %s: %s", doc.Version, doc.JSON)
}

// Now names everything committed so far, for a write made elsewhere (a migration, a
// batch job) or through a driver that cannot run a query in the transaction.
func ExampleNow() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, "postgres://app@db:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	tok, err := pgtoken.Now(ctx, conn) // after the commit; a *pgxpool.Pool will do too
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("Snapshot-After: %s", tok)
}
