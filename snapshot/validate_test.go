package snapshot_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/snapshot"
)

// A Publisher or Ticker missing what it needs is refused, naming the field, before
// it touches anything: Publish and Tick return the error, never a panic.
func TestPublisherAndTickerNameWhatTheyLack(t *testing.T) {
	r := newMemRig(t, 4)
	for _, tt := range []struct {
		field string
		spoil func(p *snapshot.Publisher)
	}{
		{"Dataset", func(p *snapshot.Publisher) { p.Dataset = "" }},
		{"Store", func(p *snapshot.Publisher) { p.Store = nil }},
		{"Source", func(p *snapshot.Publisher) { p.Source = nil }},
		{"Versions", func(p *snapshot.Publisher) { p.Versions = nil }},
		{"Data", func(p *snapshot.Publisher) { p.Data = nil }},
		{"TTL", func(p *snapshot.Publisher) { p.TTL = -1 }},
		{"gate of users", func(p *snapshot.Publisher) { p.Gates = map[string]snapshot.Gate{"users": {MinRows: -1}} }},
		{"DefaultGate", func(p *snapshot.Publisher) { p.DefaultGate = &snapshot.Gate{MaxShrink: math.NaN()} }},
	} {
		p := *r.pub
		tt.spoil(&p)
		_, err := p.Publish(context.Background(), snapshot.PublishOptions{})
		if !errors.Is(err, snapshot.ErrInvalid) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("Publish without a usable %s = %v; want ErrInvalid naming it", tt.field, err)
		}
	}
	if err := r.pub.Validate(); err != nil {
		t.Fatalf("the rig's publisher: %v", err)
	}
	tk := r.ticker(t, "me")
	tk.Holder = ""
	if _, err := tk.Tick(context.Background(), 1, snapshot.PublishOptions{}); !errors.Is(err, snapshot.ErrInvalid) || !strings.Contains(err.Error(), "Holder") {
		t.Errorf("Tick without a holder = %v; want ErrInvalid naming Holder", err)
	}
	tk.Holder, tk.Ticks = "me", nil
	if _, err := tk.Tick(context.Background(), 1, snapshot.PublishOptions{}); !errors.Is(err, snapshot.ErrInvalid) || !strings.Contains(err.Error(), "Ticks") {
		t.Errorf("Tick without a tick store = %v; want ErrInvalid naming Ticks", err)
	}
	// A publish under the lease (the watch's, syncer once's) and a keep-alive check
	// the same, not claiming a tick.
	lease := tk.Lease
	tk.Lease = nil
	if _, _, err := tk.PublishLeased(context.Background(), snapshot.PublishOptions{}); !errors.Is(err, snapshot.ErrInvalid) || !strings.Contains(err.Error(), "Lease") {
		t.Errorf("PublishLeased without a lease = %v; want ErrInvalid naming Lease", err)
	}
	tk.Lease, tk.AcquireTimeout = lease, -time.Second
	if _, _, err := tk.PublishLeased(context.Background(), snapshot.PublishOptions{}); !errors.Is(err, snapshot.ErrInvalid) || !strings.Contains(err.Error(), "AcquireTimeout") {
		t.Errorf("PublishLeased with a negative AcquireTimeout = %v; want ErrInvalid naming it", err)
	}
	p := *r.pub
	p.Data = nil
	tk.Publisher, tk.AcquireTimeout = &p, 0
	if _, _, err := tk.PublishLeasedWithin(context.Background(), time.Second, snapshot.PublishOptions{}); !errors.Is(err, snapshot.ErrInvalid) || !strings.Contains(err.Error(), "Data") {
		t.Errorf("PublishLeasedWithin without a writer = %v; want ErrInvalid naming Data", err)
	}
	if _, _, _, err := p.KeepAlive(context.Background(), snapshot.PublishOptions{}); !errors.Is(err, snapshot.ErrInvalid) || !strings.Contains(err.Error(), "Data") {
		t.Errorf("KeepAlive without a writer = %v; want ErrInvalid naming Data", err)
	}
}
