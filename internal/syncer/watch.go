package syncer

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/snapflip/snapflip/internal/retry"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// Change-driven syncs. The watch (pgsource.Watch) reports possible changes; pending
// ones are coalesced, and a sync starts as soon as none is running and MinInterval has
// passed since the last one started. The sync takes the publish lease like a scheduled
// one (no slot: a change is not a tick); a replica that finds the current version
// already read at or after the change's position publishes nothing and reads nothing,
// so several replicas that all saw a change publish it once.

// pending coalesces the changes seen since the last change-driven sync started.
type pending struct {
	mu    sync.Mutex
	any   bool
	first time.Time // when the oldest pending change was seen
	// xmax is the latest snapshot xmax a pending change was seen at, or 0 when one
	// came without (the replication stream's): then no current version is known to
	// hold every pending change, and the sync must read.
	xmax   uint64
	wake   chan struct{}
	reason pgsource.ChangeReason
}

func newPending() *pending { return &pending{wake: make(chan struct{}, 1)} }

func (p *pending) add(c pgsource.Change) {
	p.mu.Lock()
	switch {
	case !p.any:
		p.any, p.first, p.reason, p.xmax = true, c.At, c.Reason, c.Xmax
	case c.Xmax == 0:
		p.xmax = 0
	case p.xmax != 0:
		p.xmax = max(p.xmax, c.Xmax)
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take returns and clears what is pending.
func (p *pending) take() (ok bool, first time.Time, xmax uint64, reason pgsource.ChangeReason) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ok, first, xmax, reason = p.any, p.first, p.xmax, p.reason
	p.any, p.xmax = false, 0
	return
}

// watchMetrics are the watch's and change-driven syncs' metrics.
type watchMetrics struct {
	polls    prometheus.Counter
	pollTime prometheus.Histogram
	tables   prometheus.Gauge
	changes  *prometheus.CounterVec
	delay    prometheus.Histogram
	lastLag  prometheus.Gauge
	retained prometheus.Gauge
	held     *prometheus.GaugeVec
}

func newWatchMetrics(reg *prometheus.Registry, labels prometheus.Labels) *watchMetrics {
	m := &watchMetrics{
		polls: prometheus.NewCounter(prometheus.CounterOpts{Name: "snapflip_watch_polls_total",
			Help: "Polls of the source by the change watch: table statistics (stats mode) and the watched relations' definitions (both modes).", ConstLabels: labels}),
		pollTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "snapflip_watch_poll_seconds",
			Help:        "Round trip of one watch poll (its cost on Postgres: a few function calls per watched table and a read of their catalog rows).",
			ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12)}),
		tables: prometheus.NewGauge(prometheus.GaugeOpts{Name: "snapflip_watch_tables",
			Help: "Tables the change watch polls (the tables the collections read).", ConstLabels: labels}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snapflip_watch_changes_total",
			Help: "Possible changes the watch saw, by reason: statistics, commit while hot, definitions, tables changed, stream, committed, not yet visible, watch started, demand (a reader waits for a token), base built (a held or new collection's base read beside the stream waits to join a version).", ConstLabels: labels}, []string{"reason"}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "snapflip_commit_to_publish_seconds",
			Help:        "From when the watch first saw a change to the flip that published it (add up to one watch interval for the commit itself).",
			ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.05, 2, 12)}),
		lastLag: prometheus.NewGauge(prometheus.GaugeOpts{Name: "snapflip_last_commit_to_publish_seconds",
			Help: "The commit-to-publish delay of the last change-driven publish.", ConstLabels: labels}),
	}
	m.retained = prometheus.NewGauge(prometheus.GaugeOpts{Name: "snapflip_watch_slot_retained_bytes",
		Help: "WAL the replication slot keeps on the source (watch.mode logical; read by the replica that reads the slot).", ConstLabels: labels})
	m.held = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "snapflip_watch_held_transactions",
		Help:        "Committed transactions the replication stream holds for the next version (watch.mode logical), by state: keys (their changed keys kept, watch.hold_bytes bounds them) or let_go (only their collections kept: the next version compares those in full).",
		ConstLabels: labels}, []string{"state"})
	reg.MustRegister(m.polls, m.pollTime, m.tables, m.changes, m.delay, m.lastLag, m.retained, m.held)
	return m
}

// watchLeaseName is the lease whose holder reads the replication stream.
func watchLeaseName(dataset string) string { return "watch/" + dataset }

// streamRetry is the wait before the stream is read again after it failed.
const streamRetry = 3 * time.Second

// followStream reads the replication stream while this replica holds the watch
// lease, and stands by while another does, until ctx ends. A reading that fails, or
// whose lease is lost, ends; the lease is released and contended for again. A value on
// retable ends the reading and starts another at once, under the same lease: the
// tables the collections read changed, and a new reading prepares the publication for
// them and follows their relations.
func (r *Runner) followStream(ctx context.Context, log *slog.Logger, pend *pending, retable <-chan struct{}) error {
	wm := r.Metrics.watch
	lease, err := r.Store.NewLease(watchLeaseName(r.Dataset), store.LeaseConfig{
		Holder: r.Ticker.Holder, Duration: r.LeaseDuration, Observer: r.Metrics.LeaseEvents(r.Events)})
	if err != nil {
		return err
	}
	for {
		hold, err := lease.Acquire(ctx)
		if err != nil {
			return ctx.Err()
		}
		wm.tables.Set(1)
		for {
			var again bool
			again, err = r.readStream(ctx, hold.Context(), log, pend, retable)
			if !again || ctx.Err() != nil || hold.Context().Err() != nil {
				break
			}
			log.Info("the tables the collections read changed: reading the replication stream again", "err", err)
		}
		wm.tables.Set(0)
		wm.retained.Set(0) // another replica reads the slot now, and reports it
		wm.held.Reset()
		rctx, cancel := snapshot.Detach(ctx, 5*time.Second)
		_ = hold.Release(rctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Warn("reading the replication stream ended; contending for it again (the schedule still runs)", "err", err)
		if retry.Sleep(ctx, streamRetry) != nil {
			return ctx.Err()
		}
	}
}

// readStream reads the stream until ctx or held ends, the reading fails, or a value
// comes on retable; again says it ended because the tables changed (retable, or the
// reading found a table it follows dropped).
func (r *Runner) readStream(ctx, held context.Context, log *slog.Logger, pend *pending, retable <-chan struct{}) (again bool, err error) {
	wm := r.Metrics.watch
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	defer context.AfterFunc(held, stop)()
	restarted := make(chan struct{})
	go func() {
		select {
		case <-retable:
			close(restarted)
			stop()
		case <-sctx.Done():
		}
	}()
	err = r.Source.Stream(sctx, pgsource.StreamConfig{LogicalConfig: r.Watch.Logical, Observer: r.Events,
		HoldBytes: r.Watch.HoldBytes, HoldWAL: r.Watch.HoldWAL, HoldFor: r.Watch.HoldFor},
		func(c pgsource.Change) {
			wm.changes.WithLabelValues(c.Reason.String()).Inc()
			pend.add(c)
		},
		func(st pgsource.StreamStats) {
			wm.retained.Set(float64(st.RetainedBytes))
			wm.held.WithLabelValues("keys").Set(float64(st.Held))
			wm.held.WithLabelValues("let_go").Set(float64(st.LetGo))
		})
	stop()
	select {
	case <-restarted:
		return true, err
	default:
		return errors.Is(err, pgsource.ErrTablesChanged), err
	}
}

// changeAcquireTimeout bounds how long a change-driven sync waits for the lease.
const changeAcquireTimeout = 5 * time.Second

// runWatch watches the source and runs change-driven syncs until ctx ends. It returns
// once the watch has, its connections closed.
func (r *Runner) runWatch(ctx context.Context) {
	log := r.logger().With("dataset", r.Dataset)
	pend := newPending()
	watching := r.startWatchers(ctx, log, pend)
	defer func() { <-watching }()
	// A change-driven sync gives up on the lease after a few seconds (and tries again
	// after min_interval), so that it never holds this process's scheduled ticks up
	// for the whole acquire timeout, as during a Bigtable outage.
	leaseWait := min(max(r.Ticker.AcquireTimeout, time.Second), changeAcquireTimeout)
	var lastStart time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-pend.wake:
		}
		if wait := time.Until(lastStart.Add(r.Watch.MinInterval)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		ok, first, xmax, reason := pend.take()
		if !ok {
			continue
		}
		lastStart = time.Now()
		if !r.publishChange(ctx, log, pend, leaseWait, pgsource.Change{Xmax: xmax, At: first, Reason: reason}) {
			return
		}
	}
}

// startWatchers starts the source's watches, which add what they see to pend: the
// poll of the statistics or definitions, the demand of waiting readers and, in
// logical mode, the replication stream. The channel it returns is closed once every
// watch has returned.
func (r *Runner) startWatchers(ctx context.Context, log *slog.Logger, pend *pending) <-chan struct{} {
	cfg, wm := r.Watch, r.Metrics.watch
	retable := make(chan struct{}, 1)
	poll := func() error {
		// In logical mode the poll reads the definitions alone (the stream reports
		// rows), and the stream's reader reports the tables.
		return r.Source.Watch(ctx, pgsource.WatchConfig{Interval: cfg.interval(), Mode: cfg.Mode, Observer: r.Events},
			func(c pgsource.Change) {
				wm.changes.WithLabelValues(c.Reason.String()).Inc()
				pend.add(c)
				if c.Reason == pgsource.ReasonTablesChanged {
					select {
					case retable <- struct{}{}:
					default:
					}
				}
			},
			func(st pgsource.WatchStats) {
				wm.polls.Inc()
				wm.pollTime.Observe(st.PollTime.Seconds())
				if cfg.Mode != pgsource.WatchModeLogical {
					wm.tables.Set(float64(st.Tables))
				}
			})
	}
	watchers := []func() error{poll, func() error { return r.watchDemand(ctx, cfg.interval(), pend) },
		func() error { return r.watchBases(ctx, pend) }}
	if cfg.Mode == pgsource.WatchModeLogical {
		watchers = append(watchers, func() error { return r.followStream(ctx, log, pend, retable) })
	}
	watching := make(chan struct{})
	var wg sync.WaitGroup
	for _, watch := range watchers {
		wg.Go(func() {
			err := watch()
			if ctx.Err() == nil {
				// A watch gives up only when retrying cannot help: say so loudly rather
				// than carry on with the schedule alone.
				wm.tables.Set(0)
				log.Error("the change watch stopped: changes wait for the schedule until the syncer restarts", "mode", cfg.Mode, "err", err)
			}
		})
	}
	go func() { wg.Wait(); close(watching) }()
	return watching
}

// publishChange runs one change-driven sync for the pending change c, under the
// lease if it can be had within leaseWait; a failed one puts c back in pend, to be
// tried again after min_interval. It returns false once ctx has ended.
func (r *Runner) publishChange(ctx context.Context, log *slog.Logger, pend *pending, leaseWait time.Duration, c pgsource.Change) bool {
	start := time.Now()
	clog := log.With("change_seen", c.At.UTC().Format(time.RFC3339Nano), "reason", c.Reason)
	var res snapshot.PublishResult
	err := r.inCycle(func() (err error) {
		res, _, err = r.Ticker.PublishLeasedWithin(ctx, leaseWait, snapshot.PublishOptions{ChangeXmax: c.Xmax, ChangeSeen: c.At})
		return err
	})
	wm := r.Metrics.watch
	switch {
	case err != nil && ctx.Err() != nil:
		return false
	case errors.Is(err, snapshot.ErrHeld):
		// Another replica publishes; once it is done, trying again finds this change
		// published already.
		clog.Debug("another replica holds the publish lease; trying again", "err", err)
		pend.add(c)
	case errors.Is(err, snapshot.ErrRefused):
		clog.Warn("change-driven publish refused by a validation gate; the pointer is unchanged", "err", err)
	case err != nil:
		// Not lost: the change stays pending and is tried again after min_interval.
		clog.Warn("change-driven sync failed; trying again", "err", err)
		pend.add(c)
	case res.NoOp || res.Pinned:
		clog.Debug("change-driven sync: nothing to publish", "why", res.Reason, "pinned", res.Pinned)
	default:
		lag := res.Manifest.PublishedAt.Sub(c.At)
		wm.delay.Observe(lag.Seconds())
		wm.lastLag.Set(lag.Seconds())
		clog.Info("published a change", "version", res.Manifest.Version, "commit_to_publish", lag.Round(time.Millisecond).String())
	}
	if res.Reason != snapshot.ReasonPublishedAlready {
		r.Metrics.observe(res, err, time.Since(start))
	}
	r.Metrics.observeCurrent(ctx, r.Store, r.Dataset, r.TTL)
	return true
}
