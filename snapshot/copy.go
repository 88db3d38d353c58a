package snapshot

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// defaultProgressEvery is how often a long copy logs its progress.
const defaultProgressEvery = 10 * time.Second

// write copies every collection from the snapshot into storage, filling m's stats.
// A collection the snapshot can partition is read by one goroutine per part, all into
// the one writer; each part keeps its own count and digest, combined at the end.
// expected holds each collection's row count in the current version, for ETAs.
func (p *Publisher) write(ctx context.Context, snap SourceSnapshot, m *Manifest, expected map[string]int64) error {
	w := p.Store.NewWriter(ctx, p.Dataset, m.Version)
	for _, name := range p.Source.Collections() {
		parts := 1
		ps, partitioned := snap.(PartitionedSnapshot)
		if partitioned {
			parts = max(ps.Partitions(name), 1)
			if n, ok := ps.Rows(name); ok {
				expected[name] = n
			}
		}
		prog := newProgress(p.log(), p.Dataset, m.Version, name, expected[name], p.progressEvery(), p.now)
		stats := make([]CollectionStats, parts)
		digests := make([]Digest, parts)
		g, gctx := errgroup.WithContext(ctx)
		for part := range parts {
			g.Go(func() error {
				fn := func(doc Document) error {
					if p.MaxDocumentBytes > 0 && len(doc.Body) > p.MaxDocumentBytes {
						return fmt.Errorf("%w: collection %s key %q: document is %d bytes, over the limit of %d",
							ErrSource, name, truncate(doc.ID, 200), len(doc.Body), p.MaxDocumentBytes)
					}
					stats[part].Rows++
					stats[part].Bytes += int64(len(doc.Body))
					digests[part].AddDocument(doc.ID, doc.Body)
					prog.add(gctx, len(doc.Body))
					if p.Crash != nil {
						crash(p.Crash, CrashMidWrite, prog.rows.Load())
					}
					return w.Write(gctx, name, doc)
				}
				if parts == 1 {
					return snap.Scan(gctx, name, fn)
				}
				return ps.ScanPartition(gctx, name, part, parts, fn)
			})
		}
		if err := g.Wait(); err != nil {
			_, _ = w.Close(ctx)
			return fmt.Errorf("collection %s: %w", name, err)
		}
		var st CollectionStats
		var d Digest
		for i := range parts {
			st.Rows += stats[i].Rows
			st.Bytes += stats[i].Bytes
			d.Add(digests[i])
		}
		st.Digest = d.String()
		m.Collections[name] = st
		prog.done(ctx)
	}
	written, err := w.Close(ctx)
	m.BytesWritten = w.BytesWritten()
	if err != nil {
		return fmt.Errorf("write documents: %w", err)
	}
	for name, st := range m.Collections {
		st.Written = written[name]
		m.Collections[name] = st
	}
	return nil
}

func (p *Publisher) progressEvery() time.Duration {
	if p.ProgressEvery > 0 {
		return p.ProgressEvery
	}
	return defaultProgressEvery
}

// progress logs a collection's copy every interval: rows, bytes, rows/s and, when the
// expected count is known, the percentage and an ETA.
type progress struct {
	log      *slog.Logger
	every    time.Duration
	expected int64
	now      func() time.Time
	start    time.Time

	rows, bytes atomic.Int64
	mu          sync.Mutex
	next        time.Time
}

func newProgress(log *slog.Logger, dataset string, v Version, collection string, expected int64, every time.Duration, now func() time.Time) *progress {
	t := now()
	return &progress{
		log:   log.With("dataset", dataset, "version", v, "collection", collection),
		every: every, expected: expected, now: now, start: t, next: t.Add(every),
	}
}

// add counts one document; every 1024 documents it checks whether to log.
func (pr *progress) add(ctx context.Context, bytes int) {
	pr.bytes.Add(int64(bytes))
	if pr.rows.Add(1)%1024 != 0 {
		return
	}
	t := pr.now()
	pr.mu.Lock()
	if t.Before(pr.next) {
		pr.mu.Unlock()
		return
	}
	pr.next = t.Add(pr.every)
	pr.mu.Unlock()
	pr.report(ctx, t, "copying")
}

func (pr *progress) done(ctx context.Context) { pr.report(ctx, pr.now(), "collection copied") }

func (pr *progress) report(ctx context.Context, t time.Time, msg string) {
	rows := pr.rows.Load()
	secs := t.Sub(pr.start).Seconds()
	rate := 0.0
	if secs > 0 {
		rate = float64(rows) / secs
	}
	attrs := []any{"rows", rows, "bytes", pr.bytes.Load(), "rows_per_sec", int64(rate), "elapsed", t.Sub(pr.start).Round(time.Millisecond).String()}
	if pr.expected > 0 && msg == "copying" {
		left := max(pr.expected-rows, 0)
		eta := "unknown"
		if rate > 0 {
			eta = time.Duration(float64(left) / rate * float64(time.Second)).Round(time.Second).String()
		}
		attrs = append(attrs, "expected", pr.expected, "percent", min(100, 100*rows/pr.expected), "eta", eta)
	}
	pr.log.InfoContext(ctx, msg, attrs...)
}
