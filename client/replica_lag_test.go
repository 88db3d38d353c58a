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
	// The first load's OnFlip may run after Ready, even after the replica learnt of
	// the version published below: only the flips after the first are asked.
	type watched struct {
		r     *client.Replica
		first string
	}
	var rp atomic.Pointer[watched]
	lags := make(chan time.Duration, 4)
	cfg := client.DefaultReplicaConfig()
	cfg.Collections = []string{"tenants"}
	cfg.OnFlip = func(v string) {
		if w := rp.Load(); w != nil && v != w.first {
			lags <- w.r.Lag()
		}
	}
	r, err := client.NewReplica(context.Background(), c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	<-r.Ready()
	rp.Store(&watched{r: r, first: r.Version()})
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
