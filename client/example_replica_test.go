package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/snapflip/snapflip/client"
)

func ExampleReplica() {
	api := startExampleAPI() // a metadata API serving tenants; see below
	defer api.Close()

	c, err := client.New(api.URL, client.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	flipped := make(chan string, 1)
	cfg := client.DefaultReplicaConfig()
	cfg.Collections = []string{"tenants"}
	cfg.OnFlip = func(v string) { flipped <- v }
	r, err := client.NewReplica(ctx, c, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	<-r.Ready()
	<-flipped // the first version loaded

	// Reads are map lookups: no I/O, no allocation.
	if doc, ok := r.Get("tenants", "acme"); ok {
		fmt.Println("acme:", string(doc.JSON))
	}
	byPlan, err := r.Index("tenants", "plan")
	if err != nil {
		log.Fatal(err)
	}

	// A sync publishes a version that changes one tenant: the replica fetches that
	// document alone and swaps it in.
	api.publish(`{"id":"globex","plan":"pro"}`)
	<-flipped

	view := r.View() // one version for the reads below, whatever flips next
	pro, _ := view.Lookup(byPlan, "pro")
	for _, d := range pro {
		fmt.Println("pro:", d.ID)
	}
	fmt.Println("caught up:", r.Lag() == 0, r.Err() == nil, r.Stats().Changed, "collection followed by its changes")
	// Output:
	// acme: {"id":"acme","plan":"pro"}
	// pro: acme
	// pro: globex
	// caught up: true true 1 collection followed by its changes
}

// exampleAPI stands in for the metadata API (the real one is exercised in e2e), with
// just what a replica asks for: the current version, a listing and a batchGet pinned
// to a version, a version's changes, and the flip stream. Versions are the base (v0)
// and one per publish, each changing one tenant.
type exampleAPI struct {
	*httptest.Server
	mu       sync.Mutex
	versions []map[string]string // version i's tenants: id → JSON
	changed  []string            // the id version i changed (i ≥ 1)
	flips    chan struct{}
}

func exampleVersion(i int) string {
	return fmt.Sprintf("00000000-0000-4000-8000-000000000000-%d", 1767225600000+i)
}

func startExampleAPI() *exampleAPI {
	a := &exampleAPI{versions: []map[string]string{{
		"acme": `{"id":"acme","plan":"pro"}`, "globex": `{"id":"globex","plan":"free"}`}}, changed: []string{""},
		flips: make(chan struct{}, 1)}
	a.Server = httptest.NewServer(http.HandlerFunc(a.serve))
	return a
}

func (a *exampleAPI) publish(doc string) {
	var d struct{ ID string }
	_ = json.Unmarshal([]byte(doc), &d)
	a.mu.Lock()
	next := map[string]string{}
	for id, body := range a.versions[len(a.versions)-1] {
		next[id] = body
	}
	next[d.ID] = doc
	a.versions, a.changed = append(a.versions, next), append(a.changed, d.ID)
	a.mu.Unlock()
	a.flips <- struct{}{}
}

func (a *exampleAPI) serve(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	cur := len(a.versions) - 1
	at := cur
	for i := range a.versions {
		if r.URL.Query().Get("version") == exampleVersion(i) || strings.HasPrefix(r.URL.Path, "/v1/versions/"+exampleVersion(i)+"/") {
			at = i
		}
	}
	docs, changed := a.versions[at], a.changed[at]
	a.mu.Unlock()
	pointer := func(i int) map[string]any {
		return map[string]any{"version": exampleVersion(i), "flipped_at": time.UnixMilli(int64(1767225600000 + i))}
	}
	switch {
	case r.URL.Path == "/v1/versions/current":
		_ = json.NewEncoder(w).Encode(pointer(cur))
	case r.URL.Path == "/v1/watch":
		w.Header().Set("Content-Type", "text/event-stream")
		for i := cur; ; i++ {
			data, _ := json.Marshal(pointer(i))
			fmt.Fprintf(w, "id: %s\nevent: flip\ndata: %s\n\n", exampleVersion(i), data)
			w.(http.Flusher).Flush()
			select {
			case <-a.flips:
			case <-r.Context().Done():
				return
			}
		}
	case r.URL.Path == "/v1/data/tenants":
		var page []map[string]any
		for id, body := range docs {
			page = append(page, map[string]any{"id": id, "document": json.RawMessage(body)})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"version": exampleVersion(at), "documents": page})
	case r.URL.Path == "/v1/data/tenants:batchGet":
		var req struct{ IDs []string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		found, missing := map[string]json.RawMessage{}, []string{}
		for _, id := range req.IDs {
			if body, ok := docs[id]; ok {
				found[id] = json.RawMessage(body)
			} else {
				missing = append(missing, id)
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"version": exampleVersion(at), "documents": found, "missing": missing})
	case strings.HasSuffix(r.URL.Path, "/changes/tenants"):
		_ = json.NewEncoder(w).Encode(map[string]any{"version": exampleVersion(at), "parent": exampleVersion(at - 1),
			"kind": "delta", "changes": []map[string]string{{"id": changed}}})
	default:
		http.NotFound(w, r)
	}
}
