package api

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the API's Prometheus metrics.
type metrics struct {
	requests *prometheus.CounterVec
	// tokenTimeouts counts the 503s of reads whose token no version covered within
	// the wait they asked for: the client chose the bound, so an alert on the
	// server's errors leaves them out.
	tokenTimeouts prometheus.Counter
	latency       *prometheus.HistogramVec
	series        sync.Map // seriesKey -> series: the vectors' children, looked up once
}

// seriesKey names one (route, method, status) series; there are few of them, since
// routes are patterns.
type seriesKey struct {
	route, method string
	status        int
}

type series struct {
	requests prometheus.Counter
	latency  prometheus.Observer
}

func (m *metrics) lookup(k seriesKey) series {
	if s, ok := m.series.Load(k); ok {
		return s.(series)
	}
	s := series{
		requests: m.requests.WithLabelValues(k.route, k.method, strconv.Itoa(k.status)),
		latency:  m.latency.WithLabelValues(k.route),
	}
	m.series.Store(k, s)
	return s
}

func newMetrics(reg *prometheus.Registry, cfg Config, watchers func() int) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snapflip_api_requests_total",
			Help: "HTTP requests by route, method and status."}, []string{"route", "method", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "snapflip_api_request_duration_seconds",
			Help:    "HTTP request latency by route.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}}, []string{"route"}),
	}
	m.tokenTimeouts = prometheus.NewCounter(prometheus.CounterOpts{Name: "snapflip_api_token_timeouts_total",
		Help: "Reads answered 503 token-not-yet-covered: no version covered their Snapshot-After token within the wait they asked for."})
	reg.MustRegister(m.requests, m.latency, m.tokenTimeouts,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "snapflip_api_watchers", Help: "Open GET /v1/watch streams."},
			func() float64 { return float64(watchers()) }))
	if cfg.CacheStats != nil {
		reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "snapflip_api_cache_hits_total", Help: "Document cache hits."},
				func() float64 { h, _ := cfg.CacheStats(); return float64(h) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "snapflip_api_cache_misses_total", Help: "Document cache misses."},
				func() float64 { _, miss := cfg.CacheStats(); return float64(miss) }))
	}
	if cfg.Waiting != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "snapflip_api_token_waiters",
			Help: "Requests waiting for a version that covers their read-your-writes token."},
			func() float64 { return float64(cfg.Waiting()) }))
	}
	if cfg.PointerAge != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "snapflip_api_pointer_age_seconds",
			Help: "How long ago the pointer was last read successfully (-1: never)."},
			func() float64 {
				if a := cfg.PointerAge(); a >= 0 {
					return a.Seconds()
				}
				return -1
			}))
	}
	if cfg.ServedVersion != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "snapflip_api_served_version_timestamp_seconds",
			Help: "Creation time of the version unpinned reads are answered from (0: none yet)."},
			func() float64 {
				if v := cfg.ServedVersion(); v != "" {
					return float64(v.Millis()) / 1000
				}
				return 0
			}))
	}
	return m
}

// middleware counts and times every request by its route pattern (not its path, so
// ids never become label values).
func (m *metrics) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		route := "unmatched"
		if rctx := chi.RouteContext(r.Context()); rctx != nil && rctx.RoutePattern() != "" {
			route = rctx.RoutePattern()
		}
		s := m.lookup(seriesKey{route, methodLabel(r.Method), sw.status})
		s.requests.Inc()
		s.latency.Observe(time.Since(start).Seconds())
	})
}

// methodLabel bounds the method label: a client may send any token as a method.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return method
	}
	return "other"
}
