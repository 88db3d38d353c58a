package syncer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/syncer"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/rig"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

func TestRunnerValidateNamesTheField(t *testing.T) {
	sched, err := syncer.ParseSchedule("@every 1m")
	if err != nil {
		t.Fatal(err)
	}
	whole := func() *syncer.Runner {
		return &syncer.Runner{Dataset: "ds", Schedule: sched, Source: &pgsource.Source{}, Store: &store.Store{},
			Ticker: &snapshot.Ticker{}, Metrics: syncer.NewMetrics("ds")}
	}
	if err := whole().Validate(); err != nil {
		t.Fatalf("a Runner with every required field, nil Health, Events and Log, zero intervals: %v", err)
	}
	for field, spoil := range map[string]func(*syncer.Runner){
		"Dataset":           func(r *syncer.Runner) { r.Dataset = "" },
		"Schedule":          func(r *syncer.Runner) { r.Schedule = syncer.Schedule{} },
		"Watch.Interval":    func(r *syncer.Runner) { r.Watch.Interval = -time.Second },
		"Watch.MinInterval": func(r *syncer.Runner) { r.Watch.MinInterval = -time.Second },
		"Source":            func(r *syncer.Runner) { r.Source = nil },
		"Store":             func(r *syncer.Runner) { r.Store = nil },
		"Ticker":            func(r *syncer.Runner) { r.Ticker = nil },
		"Metrics":           func(r *syncer.Runner) { r.Metrics = nil },
	} {
		r := whole()
		spoil(r)
		err := r.Validate()
		if !errors.Is(err, snapshot.ErrInvalid) || !strings.Contains(err.Error(), " "+field+" ") {
			t.Errorf("without %s: Validate = %v; want ErrInvalid naming it", field, err)
		}
		if err := r.Run(t.Context()); err == nil || err.Error() != r.Validate().Error() {
			t.Errorf("without %s: Run = %v; want Validate's error", field, err)
		}
	}
	// Ticks stand in for the schedule.
	r := whole()
	r.Schedule, r.Ticks = syncer.Schedule{}, make(chan time.Time)
	if err := r.Validate(); err != nil {
		t.Errorf("a Runner with Ticks and no schedule: %v", err)
	}
}

// A Runner with no Health, Events or Log and a zero watch interval runs: its first
// sync, a change the watch sees (polling at the default interval), and a tick.
func TestRunnerTakesItsDefaults(t *testing.T) {
	rg := rig.New(t, []pgsource.Collection{{Name: "items", Table: "items", Key: "id"}},
		`CREATE TABLE items (id int PRIMARY KEY, name text)`, `INSERT INTO items VALUES (1, 'a')`)
	ticks, ticked := make(chan time.Time), make(chan error, 1)
	r := &syncer.Runner{Dataset: rig.Dataset, Ticks: ticks, Watch: syncer.Watch{Enabled: true, Mode: pgsource.WatchModeStats},
		Source: rg.Pub.Source.(*pgsource.Source), Store: rg.Store, Ticker: rg.Ticker(t, "h"), Metrics: syncer.NewMetrics(rig.Dataset),
		OnTick: func(_ snapshot.TickResult, err error) { ticked <- err }}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	first := awaitPointer(t, rg, "the first sync", snapshot.Version(""))
	rg.Exec(t, `INSERT INTO items VALUES (2, 'b')`)
	awaitPointer(t, rg, "the change-driven sync", first)
	ticks <- time.Now()
	select {
	case err := <-ticked:
		if err != nil {
			t.Errorf("tick: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the tick did not end within a minute")
	}
}

// awaitPointer waits for the pointer to name a version other than not, and returns it.
func awaitPointer(t *testing.T, rg *rig.Rig, what string, not snapshot.Version) snapshot.Version {
	t.Helper()
	var v snapshot.Version
	testenv.Eventually(t, time.Minute, func() error {
		p, err := rg.Store.ReadPointer(t.Context(), rig.Dataset)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if v = p.Version; v == not {
			return fmt.Errorf("%s: the pointer still names %q", what, not)
		}
		return nil
	})
	return v
}
