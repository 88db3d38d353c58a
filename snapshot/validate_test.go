package snapshot_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

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
}
