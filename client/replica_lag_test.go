package client_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snapflip/snapflip/client"
)

// Lag is 0 as soon as the replica holds the newest version it knows of, also when
// OnFlip asks it, which runs before the catch-up that swapped the version returns.
func TestLagInOnFlip(t *testing.T) {
	api := startExampleAPI()
	defer api.Close()
	c, err := client.New(api.URL, client.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var rp atomic.Pointer[client.Replica]
	lags := make(chan time.Duration, 4)
	cfg := client.DefaultReplicaConfig()
	cfg.Collections = []string{"tenants"}
	cfg.OnFlip = func(string) {
		if r := rp.Load(); r != nil {
			lags <- r.Lag()
		}
	}
	r, err := client.NewReplica(context.Background(), c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	<-r.Ready()
	rp.Store(r)
	api.publish(`{"id":"globex","plan":"pro"}`)
	select {
	case lag := <-lags:
		if lag != 0 {
			t.Errorf("Lag() in OnFlip of the newest version = %s; want 0", lag)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no flip within 30 s")
	}
}
