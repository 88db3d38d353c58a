package syncer

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/snapflip/snapflip/layer"
)

// basesCollector reports the bases a Compactor builds beside the stream of
// versions, read when scraped.
type basesCollector struct {
	progress          func() []layer.BaseProgress
	rows, expected    *prometheus.Desc
	building, started *prometheus.Desc
}

// ObserveBases reports, at each scrape, the progress of the bases built beside the
// stream: per collection the documents written and expected, its state, and when it
// started.
func (m *Metrics) ObserveBases(progress func() []layer.BaseProgress) {
	labels := prometheus.Labels{"dataset": m.dataset}
	m.reg.MustRegister(&basesCollector{
		progress: progress,
		rows: prometheus.NewDesc("snapflip_base_rows", "Documents written of each collection's base built beside the stream of versions.",
			[]string{"collection", "state"}, labels),
		expected: prometheus.NewDesc("snapflip_base_expected_rows", "Documents the chain a base beside the stream is built from holds.",
			[]string{"collection"}, labels),
		building: prometheus.NewDesc("snapflip_base_state", "1 for each collection's base beside the stream, by state: building, built (waiting for a version to take it), taken (the last one, until the next starts), failed (tried again later).",
			[]string{"collection", "state"}, labels),
		started: prometheus.NewDesc("snapflip_base_started_timestamp_seconds", "When each collection's base beside the stream started.",
			[]string{"collection"}, labels),
	})
}

func (c *basesCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.rows
	ch <- c.expected
	ch <- c.building
	ch <- c.started
}

func (c *basesCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.progress() {
		ch <- prometheus.MustNewConstMetric(c.rows, prometheus.GaugeValue, float64(p.Rows), p.Collection, p.State)
		ch <- prometheus.MustNewConstMetric(c.expected, prometheus.GaugeValue, float64(p.Expected), p.Collection)
		ch <- prometheus.MustNewConstMetric(c.building, prometheus.GaugeValue, 1, p.Collection, p.State)
		ch <- prometheus.MustNewConstMetric(c.started, prometheus.GaugeValue, float64(p.Started.UnixNano())/1e9, p.Collection)
	}
}
