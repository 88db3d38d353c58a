package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/snapflip/snapflip/api"
	"github.com/snapflip/snapflip/client"
	"github.com/snapflip/snapflip/internal/memstore"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/resolver"
	"github.com/snapflip/snapflip/snapshot"
)

// gatedSource is a memory source whose snapshots wait for a release: a base read
// beside the stream held in flight.
type gatedSource struct {
	*memstore.Source
	release chan struct{}
}

func (g *gatedSource) Open(ctx context.Context) (snapshot.SourceSnapshot, error) {
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Source.Open(ctx)
}

// heldWorld is the API over a memory dataset whose syncer holds collections whose
// definition changed while their bases are read beside the stream.
type heldWorld struct {
	st    *memstore.Store
	src   *memstore.Source
	pub   *snapshot.Publisher
	bases *layer.Compactor
	res   *resolver.Resolver
	srv   *api.Server
	gate  *gatedSource
}

func newHeldWorld(t *testing.T) *heldWorld {
	st, src := memstore.New(), memstore.NewSource("users", "orders")
	src.Put("users", "u1", `{"name":"ada"}`)
	src.Put("orders", "1", `{"user":"u1"}`)
	w := &layer.Writer{Store: st, MaxDocumentBytes: 1 << 20, BesideMinRows: 1}
	gate := &gatedSource{Source: src, release: make(chan struct{}, 1)}
	versions := snapshot.NewVersionGen(uuid.New(), nil)
	c := &layer.Compactor{Dataset: "ds", Writer: w, Docs: st, Versions: versions, RowsPerSecond: -1, Source: gate}
	ctx, cancel := context.WithCancel(context.Background())
	c.Start(ctx)
	t.Cleanup(func() { cancel(); c.Wait() })
	w.Compactor = c
	pub := &snapshot.Publisher{Dataset: "ds", Store: st, Source: src, Writer: "w", Incremental: true, Versions: versions, Data: w, Bases: c}
	res, err := resolver.New("ds", st, resolver.Config{Refresh: 5 * time.Millisecond, Layers: layer.NewReader(st, "ds")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &heldWorld{st: st, src: src, pub: pub, bases: c, res: res, srv: newServer(t, res, nil), gate: gate}
}

func (h *heldWorld) publish(t *testing.T) snapshot.Manifest {
	t.Helper()
	r, err := h.pub.Publish(context.Background(), snapshot.PublishOptions{})
	if err != nil || r.NoOp {
		t.Fatalf("publish = %+v, %v", r, err)
	}
	// The API serves it once its pointer refresh lands.
	testenv.Eventually(t, 10*time.Second, func() error {
		p, err := h.res.Pointer(context.Background())
		if err == nil && p.Version != r.Manifest.Version {
			err = errSoon
		}
		return err
	})
	return r.Manifest
}

var errSoon = &soonError{}

type soonError struct{}

func (*soonError) Error() string { return "not served yet" }

// A held collection answers the token of an earlier answer (every Snapshot-Token),
// as it never goes back, and says it is held; a write's token that its held
// position does not cover is never answered from it: the read waits, gets 503 at its
// limit, or, naming the version, 412, until a version takes its new base.
func TestHeldCollectionAndTokens(t *testing.T) {
	h := newHeldWorld(t)
	h.publish(t)
	h.src.Redefine("users")
	h.src.Put("users", "u1", `{"name":"ada lovelace"}`)
	write := h.src.Token() // the write's token, as pgtoken makes one after a commit
	v2 := h.publish(t)
	if v2.Collections["users"].Held == nil {
		t.Fatalf("v2's users = %+v; want held", v2.Collections["users"])
	}

	// Another collection answers the write's token at once: the version covers it.
	res, _ := do(t, h.srv, http.MethodGet, "/v1/data/orders/1", "", api.HeaderAfter, write)
	answered := res.Header.Get(api.HeaderToken)
	if res.StatusCode != 200 || !strings.Contains(answered, "~"+string(v2.Version)) {
		t.Fatalf("orders with the write's token = %d, token %q; want 200 from %s", res.StatusCode, answered, v2.Version)
	}
	// The held collection answers the earlier answer's token, old and whole, and says so.
	res, body := do(t, h.srv, http.MethodGet, "/v1/data/users/u1", "", api.HeaderAfter, answered)
	if res.StatusCode != 200 || !strings.Contains(string(body), `"ada"`) || strings.Contains(string(body), "shape") ||
		res.Header.Get(api.HeaderHeld) == "" {
		t.Fatalf("held users with an answer's token = %d %s, %s %q; want 200, the old document, and the header",
			res.StatusCode, body, api.HeaderHeld, res.Header.Get(api.HeaderHeld))
	}
	// The write's token is not answered from the held collection.
	res, body = do(t, h.srv, http.MethodGet, "/v1/data/users/u1", "", api.HeaderAfter, write, "Prefer", "wait=0.2")
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "holds the collection") {
		t.Fatalf("held users with the write's token = %d %s; want 503 saying it is held", res.StatusCode, body)
	}
	res, body = do(t, h.srv, http.MethodGet, "/v1/data/users/u1?version="+string(v2.Version), "", api.HeaderAfter, write)
	if res.StatusCode != http.StatusPreconditionFailed || !strings.Contains(string(body), "holds collection users") {
		t.Fatalf("held users of a named version with the write's token = %d %s; want 412", res.StatusCode, body)
	}
	// /v1/collections says which collection is held, and since when.
	_, body = do(t, h.srv, http.MethodGet, "/v1/collections", "")
	var cols struct {
		Collections []struct {
			Name string        `json:"name"`
			Held *api.HeldInfo `json:"held"`
		} `json:"collections"`
	}
	if err := json.Unmarshal(body, &cols); err != nil || len(cols.Collections) != 2 || cols.Collections[1].Name != "users" ||
		cols.Collections[1].Held == nil || cols.Collections[0].Held != nil || cols.Collections[1].Held.Token == "" {
		t.Fatalf("collections = %s, %v; want users held with its token, orders not", body, err)
	}

	// The flip stream names the hold, and a client.Replica shows it.
	url := serveWatch(t, h.srv)
	var ev struct {
		Collections map[string]struct {
			Held *api.HeldInfo `json:"held"`
		} `json:"collections"`
	}
	if b := watchBlocks(t, url, "", 2)[1]; json.Unmarshal([]byte(strings.TrimPrefix(b[2], "data: ")), &ev) != nil ||
		ev.Collections["users"].Held == nil || ev.Collections["orders"].Held != nil {
		t.Fatalf("flip event %q; want users held, orders not", b)
	}
	cl, err := client.New(url, client.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	flips := make(chan string, 10)
	cfg := client.DefaultReplicaConfig()
	cfg.Collections, cfg.OnFlip = []string{"users", "orders"}, func(v string) { flips <- v }
	rep, err := client.NewReplica(context.Background(), cl, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	<-flips
	if tok, held := rep.View().Held("users"); !held || tok == "" {
		t.Fatalf("the replica's users: held %t, token %q; want held, with its position's token", held, tok)
	}
	if _, held := rep.View().Held("orders"); held {
		t.Fatal("the replica's orders: held; want not")
	}

	// A read with the write's token waits for the version that takes the new base.
	got := make(chan string, 1)
	go func() {
		res, body := do(t, h.srv, http.MethodGet, "/v1/data/users/u1", "", api.HeaderAfter, write, "Prefer", "wait=10")
		got <- res.Status + " " + string(body) + " held=" + res.Header.Get(api.HeaderHeld)
	}()
	testenv.Eventually(t, 10*time.Second, func() error {
		if h.res.Waiting() == 0 {
			return errSoon
		}
		return nil
	})
	h.gate.release <- struct{}{}
	h.bases.Wait()
	v3 := h.publish(t)
	if v3.Collections["users"].Held != nil {
		t.Fatalf("v3's users = %+v; want its new base, caught up", v3.Collections["users"])
	}
	for v := range flips { // the replica reads users anew, in its new shape
		if v == string(v3.Version) {
			break
		}
	}
	if doc, ok := rep.Get("users", "u1"); !ok || !strings.Contains(string(doc.JSON), `"shape":1`) {
		t.Fatalf("the replica's users/u1 after v3 = %s, %t; want the new shape", doc.JSON, ok)
	}
	if _, held := rep.View().Held("users"); held {
		t.Fatal("the replica's users: still held after v3")
	}
	if answer := <-got; !strings.HasPrefix(answer, "200") || !strings.Contains(answer, `"ada lovelace"`) ||
		!strings.Contains(answer, `"shape":1`) || !strings.HasSuffix(answer, "held=") {
		t.Fatalf("the waiting read = %s; want 200 with the new document in its new shape, not held", answer)
	}
}

// A pinned version that holds a collection answers a write's token it does not cover
// for that collection with 412 at once: no version comes while the pin lasts.
func TestHeldCollectionPinned(t *testing.T) {
	h := newHeldWorld(t)
	h.publish(t)
	h.src.Redefine("users")
	h.src.Put("users", "u1", `{"name":"ada lovelace"}`)
	write := h.src.Token()
	v2 := h.publish(t)
	ctx := context.Background()
	p, err := h.st.ReadPointer(ctx, "ds")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.st.FlipPointer(ctx, "ds", snapshot.Flip{Version: v2.Version, Expected: v2.Version, Fence: p.Fence + 1,
		Source: p.Source, Rollback: true, Pin: true, Reason: "test pin", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if p, err := h.res.Pointer(ctx); err != nil || !p.Pinned {
			return errSoon
		}
		return nil
	})
	// 412, not the 503 that a wait to its bound ends with.
	res, body := do(t, h.srv, http.MethodGet, "/v1/data/users/u1", "", api.HeaderAfter, write, "Prefer", "wait=5")
	if res.StatusCode != http.StatusPreconditionFailed || !strings.Contains(string(body), "holds the collection") {
		t.Fatalf("a pinned held collection with a write's token = %d %s; want 412", res.StatusCode, body)
	}
}
