package syncer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/snapflip/snapflip/snapshot"
)

// Metrics are the syncer's Prometheus metrics.
type Metrics struct {
	dataset          string
	reg              *prometheus.Registry
	leaseEventsTotal *prometheus.CounterVec
	leaseHeld        prometheus.Gauge
	leaseToken       prometheus.Gauge
	slots            *prometheus.CounterVec
	syncs            *prometheus.CounterVec
	lastSuccess      prometheus.Gauge
	duration         prometheus.Histogram
	rows             *prometheus.CounterVec
	bytes            *prometheus.CounterVec
	age              prometheus.Gauge
	ttl              prometheus.Gauge
	pinned           prometheus.Gauge
	refreshed        prometheus.Counter
	// What publishes wrote: bytes, rows rendered, rows written by kind, layers by
	// kind, and the current version's chain lengths.
	bytesWritten prometheus.Counter
	rendered     prometheus.Counter
	rowsWritten  *prometheus.CounterVec
	layers       *prometheus.CounterVec
	chainLength  *prometheus.GaugeVec
	watch        *watchMetrics
}

// NewMetrics returns the metrics of a syncer of dataset, in a registry of their own
// with Go's and the process's.
func NewMetrics(dataset string) *Metrics {
	labels := prometheus.Labels{"dataset": dataset}
	m := &Metrics{
		dataset: dataset,
		reg:     prometheus.NewRegistry(),
		leaseEventsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snapflip_lease_events_total",
			Help: "Lease events of this replica: acquired, takeover, released, lost.", ConstLabels: labels}, []string{"kind"}),
		leaseHeld: prometheus.NewGauge(prometheus.GaugeOpts{Name: "snapflip_lease_held",
			Help: "1 while this replica holds the publish lease.", ConstLabels: labels}),
		leaseToken: prometheus.NewGauge(prometheus.GaugeOpts{Name: "snapflip_lease_token",
			Help: "The fencing token of this replica's latest hold.", ConstLabels: labels}),
		slots: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snapflip_slots_total",
			Help: "Scheduled ticks, by whether this replica claimed them.", ConstLabels: labels}, []string{"result"}),
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snapflip_syncs_total",
			Help: "Syncs run by this replica, by result: published, unchanged, refused, pinned, failed, held (another replica held the publish lease).", ConstLabels: labels}, []string{"result"}),
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snapflip_rows_copied_total",
			Help: "Documents copied into published versions, by collection.", ConstLabels: labels}, []string{"collection"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snapflip_bytes_copied_total",
			Help: "Document bytes copied into published versions, by collection.", ConstLabels: labels}, []string{"collection"}),
		age: prometheus.NewGauge(prometheus.GaugeOpts{Name: "snapflip_current_version_age_seconds",
			Help: "Age of the current version's data (its cells' timestamp); it must stay under the TTL.", ConstLabels: labels}),
		ttl: prometheus.NewGauge(prometheus.GaugeOpts{Name: "snapflip_ttl_seconds",
			Help: "The configured document TTL.", ConstLabels: labels}),
		pinned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "snapflip_pinned",
			Help: "1 while the dataset is pinned (scheduled publishing paused).", ConstLabels: labels}),
		refreshed: prometheus.NewCounter(prometheus.CounterOpts{Name: "snapflip_pinned_refreshed_rows_total",
			Help: "Documents of a pinned version rewritten to keep them from expiring.", ConstLabels: labels}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Name: "snapflip_last_success_timestamp_seconds",
			Help: "When this replica last finished a sync that published or found nothing to do.", ConstLabels: labels}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "snapflip_sync_duration_seconds",
			Help: "Duration of syncs that ran.", ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.1, 2, 14)}),
		bytesWritten: prometheus.NewCounter(prometheus.CounterOpts{Name: "snapflip_sync_bytes_written_total",
			Help: "Bytes (row keys and values) published versions sent to storage.", ConstLabels: labels}),
		rendered: prometheus.NewCounter(prometheus.CounterOpts{Name: "snapflip_sync_rows_rendered_total",
			Help:        "Source rows turned into JSON for published versions: every row of a full copy; for a layer, the rows its change detection could not skip.",
			ConstLabels: labels}),
		rowsWritten: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snapflip_sync_rows_written_total",
			Help:        "Rows published versions wrote, by kind: doc (inserted or changed documents; every document of a full copy), tombstone (deleted ids) or copied (unchanged documents and tombstones a merged delta carried over from the deltas it replaced).",
			ConstLabels: labels}, []string{"kind"}),
		layers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snapflip_sync_layers_total",
			Help: "Layers published versions wrote, one per collection that wrote one, by kind: base, delta, or merged (a delta that replaced the chain's deltas).", ConstLabels: labels}, []string{"kind"}),
		chainLength: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "snapflip_version_chain_length",
			Help: "Layers a read of the collection consults in the current version (1 for a full copy).", ConstLabels: labels}, []string{"collection"}),
	}
	for _, k := range []string{"doc", "tombstone", "copied"} {
		m.rowsWritten.WithLabelValues(k)
	}
	for _, k := range []string{string(snapshot.LayerBase), string(snapshot.LayerDelta), layerMerged} {
		m.layers.WithLabelValues(k)
	}
	m.reg.MustRegister(m.leaseEventsTotal, m.leaseHeld, m.leaseToken, m.slots, m.syncs, m.lastSuccess, m.duration,
		m.rows, m.bytes, m.age, m.ttl, m.pinned, m.refreshed,
		m.bytesWritten, m.rendered, m.rowsWritten, m.layers, m.chainLength,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.watch = newWatchMetrics(m.reg, labels)
	return m
}

// leaseEventLabels are the kind labels of snapflip_lease_events_total.
var leaseEventLabels = map[snapshot.EventKind]string{snapshot.EventLeaseAcquired: "acquired",
	snapshot.EventLeaseTakeover: "takeover", snapshot.EventLeaseReleased: "released", snapshot.EventLeaseLost: "lost",
	snapshot.EventLeaseWaiting: "waiting"}

// LeaseEvents is a lease's observer: it counts the lease's events, tracks whether
// this replica holds it and with which token, and passes every event on to next
// (none when next is nil).
func (m *Metrics) LeaseEvents(next snapshot.Observer) snapshot.Observer {
	return snapshot.ObserverFunc(func(ctx context.Context, e snapshot.Event) {
		if label, ok := leaseEventLabels[e.Kind]; ok {
			m.leaseEventsTotal.WithLabelValues(label).Inc()
		}
		switch e.Kind {
		case snapshot.EventLeaseAcquired, snapshot.EventLeaseTakeover:
			m.leaseHeld.Set(1)
			if token, ok := e.Attr("fence").(uint64); ok {
				m.leaseToken.Set(float64(token))
			}
		case snapshot.EventLeaseReleased, snapshot.EventLeaseLost:
			m.leaseHeld.Set(0)
		}
		if next != nil {
			next.Observe(ctx, e)
		}
	})
}

// observe records the outcome of one sync.
func (m *Metrics) observe(res snapshot.PublishResult, err error, took time.Duration) {
	switch {
	case errors.Is(err, snapshot.ErrHeld):
		m.syncs.WithLabelValues("held").Inc()
	case errors.Is(err, snapshot.ErrRefused):
		m.syncs.WithLabelValues("refused").Inc()
	case err != nil:
		m.syncs.WithLabelValues("failed").Inc()
	case res.Pinned:
		m.syncs.WithLabelValues("pinned").Inc()
		m.refreshed.Add(float64(res.Refreshed))
		m.lastSuccess.SetToCurrentTime()
	case res.NoOp:
		m.syncs.WithLabelValues("unchanged").Inc()
		m.lastSuccess.SetToCurrentTime()
	default:
		m.syncs.WithLabelValues("published").Inc()
		m.lastSuccess.SetToCurrentTime()
		for name, c := range res.Manifest.Collections {
			m.rows.WithLabelValues(name).Add(float64(c.Rows))
			m.bytes.WithLabelValues(name).Add(float64(c.Bytes))
		}
		m.observeWritten(res.Manifest)
		m.observeChains(res.Manifest)
	}
	m.duration.Observe(took.Seconds())
}

// observeWritten counts what a published version's publish wrote.
func (m *Metrics) observeWritten(mf snapshot.Manifest) {
	m.bytesWritten.Add(float64(mf.BytesWritten))
	var rendered, docs, tombstones, copied int64
	for _, c := range mf.Collections {
		o := c.Own
		if o == nil {
			// A full copy renders and writes every row.
			rendered += c.Rows
			docs += c.Written
			continue
		}
		rendered += o.Rendered
		docs += o.Inserted + o.Changed
		tombstones += o.Deleted
		copied += o.Copied
		switch {
		case o.Kind == snapshot.LayerDelta && len(c.Layers) > 0 && c.Layers[0].Merged > 0:
			m.layers.WithLabelValues(layerMerged).Inc()
		case o.Kind == snapshot.LayerBase || o.Kind == snapshot.LayerDelta:
			m.layers.WithLabelValues(string(o.Kind)).Inc()
		}
	}
	m.rendered.Add(float64(rendered))
	m.rowsWritten.WithLabelValues("doc").Add(float64(docs))
	m.rowsWritten.WithLabelValues("tombstone").Add(float64(tombstones))
	m.rowsWritten.WithLabelValues("copied").Add(float64(copied))
}

// layerMerged is the metrics' kind of a delta that merged its chain's deltas.
const layerMerged = "merged"

// observeChains sets the chain length of each collection of mf, the current version;
// collections it does not have are dropped.
func (m *Metrics) observeChains(mf snapshot.Manifest) {
	m.chainLength.Reset()
	for name, c := range mf.Collections {
		m.chainLength.WithLabelValues(name).Set(float64(max(len(c.Layers), 1)))
	}
}

// currentStore is what observeCurrent reads.
type currentStore interface {
	ReadPointer(ctx context.Context, dataset string) (snapshot.Pointer, error)
	ReadManifest(ctx context.Context, dataset string, v snapshot.Version) (snapshot.Manifest, error)
}

// observeCurrent sets the current version's age, pinned state and chain lengths.
func (m *Metrics) observeCurrent(ctx context.Context, st currentStore, dataset string, ttl time.Duration) {
	m.ttl.Set(ttl.Seconds())
	p, err := st.ReadPointer(ctx, dataset)
	if err != nil {
		return
	}
	m.pinned.Set(map[bool]float64{true: 1}[p.Pinned])
	if mf, err := st.ReadManifest(ctx, dataset, p.Version); err == nil {
		m.age.Set(time.Since(mf.DataTime()).Seconds())
		m.observeChains(mf)
	}
}

// Serve serves m on /metrics, h on /healthz and /readyz (when not nil) and Go's
// profiles under /debug/pprof/ on addr until ctx ends or the function it returns is
// called; "" serves nothing.
func Serve(ctx context.Context, addr string, m *Metrics, h *Health, log *slog.Logger) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	// Go's profiles, for finding where a sync spends its time: e.g.
	// go tool pprof http://ADDR/debug/pprof/profile?seconds=30
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	if h != nil {
		h.handle(mux)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	log.Info("metrics listening", "addr", ln.Addr().String())
	stop := sync.OnceFunc(func() {
		sctx, cancel := snapshot.Detach(ctx, 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	context.AfterFunc(ctx, stop)
	return stop, nil
}
