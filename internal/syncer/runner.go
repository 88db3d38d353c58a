// Package syncer runs the syncer: a dataset's syncs on its schedule's ticks and, with
// a watch, on the changes the watch sees, under the dataset's leases; its health
// (/healthz, /readyz) and its Prometheus metrics. The commands that start it, and the
// config it is wired from, live in internal/cli.
package syncer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// Runner is a wired syncer: what it syncs with, and when.
type Runner struct {
	Dataset  string
	Schedule Schedule
	// Watch says whether and how changes start syncs between ticks.
	Watch Watch
	// LeaseDuration is the watch lease's (the replica that reads the replication
	// stream holds it); zero: the lease's default.
	LeaseDuration time.Duration
	// TTL is the documents' time to live, as the metrics report it.
	TTL time.Duration

	Source *pgsource.Source
	Store  *store.Store
	Ticker *snapshot.Ticker
	// Metrics and Health are told of every sync; Events hears what the source's
	// watch and stream and the watch lease report; Log says what the Runner does.
	// Metrics is required; a nil Health, Events or Log is told nothing.
	Metrics *Metrics
	Health  *Health
	Events  snapshot.Observer
	Log     *slog.Logger

	// BaseBuilt, when set, receives a value when the base of a held or new
	// collection read beside the stream is built: the watch then publishes, so
	// that a version takes it without waiting for a change or the schedule.
	BaseBuilt <-chan struct{}

	// Ticks, when set, replaces the schedule's clock (tests): each value is one
	// scheduled tick time.
	Ticks <-chan time.Time
	// OnTick, when set, is called after every scheduled tick with its outcome (tests).
	OnTick func(snapshot.TickResult, error)

	// cycle keeps this process's scheduled and change-driven cycles apart.
	cycle sync.Mutex
}

// DefaultWatchInterval is how often a watch polls when Watch.Interval is zero.
const DefaultWatchInterval = 200 * time.Millisecond

// Watch is how changes start syncs between the schedule's ticks.
type Watch struct {
	Enabled bool
	Mode    pgsource.WatchMode
	// Interval is how often the watch polls (zero: DefaultWatchInterval);
	// MinInterval the least time between the starts of two change-driven syncs
	// (zero: none).
	Interval, MinInterval time.Duration
	// Logical names the publication and slot of WatchModeLogical.
	Logical pgsource.LogicalConfig
	// HoldBytes, HoldWAL and HoldFor bound what the stream holds for the next
	// version (pgsource.StreamConfig's fields; zero: their defaults).
	HoldBytes, HoldWAL int64
	HoldFor            time.Duration
}

// logical reports whether the watch reads the replication stream.
func (w Watch) logical() bool { return w.Enabled && w.Mode == pgsource.WatchModeLogical }

// interval is how often the watch polls.
func (w Watch) interval() time.Duration { return cmp.Or(w.Interval, DefaultWatchInterval) }

// Validate reports the first field of r that Run cannot work with, as an error naming
// it and wrapping snapshot.ErrInvalid. Zero fields take the defaults their comments
// give.
func (r *Runner) Validate() error {
	for _, f := range []struct {
		name string
		ok   bool
	}{
		{"Dataset", r.Dataset != ""},
		{"Schedule", r.Schedule.String() != "" || r.Ticks != nil},
		{"Watch.Interval", r.Watch.Interval >= 0}, {"Watch.MinInterval", r.Watch.MinInterval >= 0},
		{"Source", r.Source != nil}, {"Store", r.Store != nil}, {"Ticker", r.Ticker != nil}, {"Metrics", r.Metrics != nil},
	} {
		if !f.ok {
			return fmt.Errorf("%w syncer runner: %s is missing or negative", snapshot.ErrInvalid, f.name)
		}
	}
	return nil
}

// logger is r.Log, or one that writes nothing.
func (r *Runner) logger() *slog.Logger {
	if r.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Log
}

// Ping says whether Bigtable and Postgres answer (for /readyz).
func (r *Runner) Ping(ctx context.Context) error {
	if _, err := r.Store.ReadPointer(ctx, r.Dataset); err != nil && !errors.Is(err, snapshot.ErrNoVersion) {
		return fmt.Errorf("bigtable: %w", err)
	}
	if err := r.Source.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	return nil
}

// PublishNow runs one sync now, under the publish lease, outside the schedule, and
// records it in the metrics.
func (r *Runner) PublishNow(ctx context.Context, opts snapshot.PublishOptions) (snapshot.PublishResult, uint64, error) {
	start := time.Now()
	res, token, err := r.Ticker.PublishLeased(ctx, opts)
	r.Metrics.observe(res, err, time.Since(start))
	r.Metrics.observeCurrent(ctx, r.Store, r.Dataset, r.TTL)
	return res, token, err
}

// Run runs one cycle per scheduled tick until ctx ends. Every replica runs the
// schedule; the replica that claims a tick publishes it. A tick that comes
// while a cycle runs is skipped (the next one is computed when the cycle ends). If
// nothing is published yet, it syncs at once, outside the schedule. On shutdown it
// stops at the next tick boundary; a running cycle is cancelled, which leaves the
// pointer alone and releases the lease.
func (r *Runner) Run(ctx context.Context) error {
	if err := r.Validate(); err != nil {
		return err
	}
	log := r.logger().With("dataset", r.Dataset)
	if r.Watch.logical() {
		// What logical mode needs and cannot make itself is a configuration error:
		// refuse to start, naming it, rather than fall back to the schedule silently.
		if _, err := r.Source.PrepareLogical(ctx, r.Watch.Logical); errors.Is(err, pgsource.ErrLogicalSetup) {
			return err
		} else if err != nil {
			log.Warn("could not prepare the logical watch yet; it will retry", "err", err)
		}
	}
	if _, err := r.Store.ReadPointer(ctx, r.Dataset); errors.Is(err, snapshot.ErrNoVersion) {
		log.Info("nothing published yet: syncing now")
		start := time.Now()
		var res snapshot.PublishResult
		err := r.inCycle(func() (err error) {
			res, _, err = r.Ticker.PublishLeased(ctx, snapshot.PublishOptions{})
			return err
		})
		r.Metrics.observe(res, err, time.Since(start))
		if err != nil && !errors.Is(err, snapshot.ErrFenced) && !errors.Is(err, snapshot.ErrConflict) {
			log.Error("first sync failed", "err", err)
		}
	}
	log.Info("syncer running", "schedule", r.Schedule.String(), "watch", r.Watch.Enabled, "watch_mode", r.Watch.Mode)
	if r.Watch.Enabled {
		wctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); r.runWatch(wctx) }()
		defer func() { stop(); <-done }()
	}
	for {
		tick, ok := r.nextTick(ctx)
		if !ok {
			log.Info("stopped")
			return nil
		}
		n := r.Schedule.Number(tick)
		tlog := log.With("tick", n, "at", tick.UTC().Format(time.RFC3339))
		tlog.Debug("tick started")
		start := time.Now()
		var res snapshot.TickResult
		err := r.inCycle(func() (err error) {
			res, err = r.Ticker.Tick(ctx, n, snapshot.PublishOptions{})
			return err
		})
		switch {
		case err != nil && ctx.Err() != nil:
			tlog.Info("sync abandoned for shutdown", "err", err)
		case errors.Is(err, snapshot.ErrRefused):
			tlog.Warn("publish refused by a validation gate; the pointer is unchanged (syncer once --force overrides)", "err", err)
		case err != nil:
			tlog.Error("sync failed", "err", err)
		case !res.Claimed:
			tlog.Debug("tick claimed by another replica", "owner", res.Owner)
		}
		if res.Claimed {
			r.Metrics.slots.WithLabelValues("claimed").Inc()
			r.Metrics.observe(res.Publish, err, time.Since(start))
		} else if err == nil {
			r.Metrics.slots.WithLabelValues("other").Inc()
		}
		r.Metrics.observeCurrent(ctx, r.Store, r.Dataset, r.TTL)
		if r.OnTick != nil {
			r.OnTick(res, err)
		}
	}
}

// inCycle runs one sync under the process's cycle lock (its scheduled and
// change-driven syncs take turns), telling Health when it starts and how it ends.
func (r *Runner) inCycle(sync func() error) error {
	r.cycle.Lock()
	defer r.cycle.Unlock()
	r.Health.begin()
	err := sync()
	r.Health.end(err)
	return err
}

// nextTick waits for the next scheduled tick, or takes it from r.Ticks.
func (r *Runner) nextTick(ctx context.Context) (time.Time, bool) {
	if r.Ticks != nil {
		select {
		case t, ok := <-r.Ticks:
			return t, ok && ctx.Err() == nil
		case <-ctx.Done():
			return time.Time{}, false
		}
	}
	next := r.Schedule.Next(time.Now())
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	select {
	case <-timer.C:
		return next, true
	case <-ctx.Done():
		return time.Time{}, false
	}
}
