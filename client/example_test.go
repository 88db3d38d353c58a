package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/snapflip/snapflip/client"
)

// These examples are compiled, not run: they need a metadata API at the address.

func ExampleClient_Get() {
	cfg := client.DefaultConfig()
	cfg.CacheBytes = 16 << 20 // revalidate documents read before: a 304 has no body
	c, err := client.New("http://metadata-api:8080", cfg)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	doc, err := c.Get(ctx, "tenants", "acme/eu#1") // sent as /v1/data/tenants/acme%2Feu%231
	var apiErr *client.Error
	switch {
	case errors.Is(err, client.ErrNotFound):
		fmt.Println("no such tenant")
		return
	case errors.As(err, &apiErr):
		log.Fatalf("status %d (%s): %s", apiErr.StatusCode, apiErr.Title, apiErr.Detail)
	case err != nil:
		log.Fatal(err) // the context ended
	}
	var tenant struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	}
	if err := doc.Decode(&tenant); err != nil {
		log.Fatal(err)
	}
	fmt.Println(tenant.Name, "as of version", doc.Version)
}

func ExampleClient_Snapshot() {
	c, err := client.New("http://metadata-api:8080", client.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	snap, err := c.Snapshot(ctx) // every read below comes from this one version
	if err != nil {
		log.Fatal(err)
	}
	tenant, err := snap.Get(ctx, "tenants", "tenant-0042")
	if err != nil {
		log.Fatal(err)
	}
	configs, missing, _, err := snap.BatchGet(ctx, "tenant_config", []string{"tenant-0042/limits", "tenant-0042/plan"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(tenant.JSON), len(configs), missing)
	n := 0
	for _, err := range snap.List(ctx, "active_flags", client.ListOptions{PageSize: 500}) {
		if errors.Is(err, client.ErrGone) {
			log.Fatal("the version expired mid-way: take a new snapshot and start again")
		} else if err != nil {
			log.Fatal(err)
		}
		n++
	}
	fmt.Println(n, "flags in version", snap.Version())
}

func ExampleAfter() {
	c, err := client.New("http://metadata-api:8080", client.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	tok := "x:748" // from the writer: 'x:' || pg_current_xact_id() in its transaction (see package pgtoken)
	doc, err := c.Get(ctx, "tenants", "acme", client.After(tok))
	switch {
	case errors.Is(err, client.ErrNotYetCovered):
		log.Fatal("no sync published the write within the wait: try again later")
	case errors.Is(err, client.ErrNotCovered):
		log.Fatal("an operator rolled the dataset back below the write")
	case err != nil:
		log.Fatal(err)
	}
	fmt.Println(string(doc.JSON), "holds the write")
}

func ExampleReplica_WaitFor() {
	c, err := client.New("http://metadata-api:8080", client.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	cfg := client.DefaultReplicaConfig()
	cfg.Collections = []string{"tenants"}
	r, err := client.NewReplica(context.Background(), c, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	view, err := r.WaitFor(ctx, "x:748") // the writer's token
	if err != nil {
		log.Fatal(err) // the context's error, ErrPinned, or ErrTokenRejected
	}
	doc, _ := view.Get("tenants", "acme")
	fmt.Println(string(doc.JSON), "as of version", view.Version())
}
