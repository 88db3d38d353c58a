package layer_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/snapshot"
)

// BenchmarkBaseLayer measures the write path of a full sync: one publish of a base
// layer of 100,000 documents of about 330 bytes, read from memory, through the
// store's writer into the Bigtable emulator. Besides -benchmem's figures per publish
// it reports per row the allocations and bytes allocated, which the syncer pays for
// in malloc and GC CPU, and the CPU time of the process (all its threads, so GC's
// too), which a shared machine disturbs less than it does the wall time; the
// emulator runs in its own process and is not counted.
func BenchmarkBaseLayer(b *testing.B) {
	const rows = 100_000
	src := newMemSource("items", rows)
	st := testenv.Store(b, testenv.StoreConfig(testenv.Bigtable(b)))
	pub := &snapshot.Publisher{
		Dataset: "bench", Store: st, Source: src,
		Versions: snapshot.NewVersionGen(uuid.New(), nil), Writer: "bench",
		Incremental: true,
		Data:        &layer.Writer{Store: st, MaxLayers: 1},
	}
	ctx := context.Background()
	var before, after runtime.MemStats
	b.ReportAllocs()
	b.ResetTimer()
	runtime.ReadMemStats(&before)
	cpu0 := cpuTime(b)
	for range b.N {
		res, err := pub.Publish(ctx, snapshot.PublishOptions{Force: true})
		if err != nil {
			b.Fatal(err)
		}
		if own := res.Manifest.Collections["items"].Own; own == nil || own.Kind != snapshot.LayerBase || own.Written != rows {
			b.Fatalf("the publish did not write a base layer of %d rows: %+v", rows, own)
		}
	}
	cpu := cpuTime(b) - cpu0
	runtime.ReadMemStats(&after)
	b.StopTimer()
	n := float64(b.N) * rows
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/row")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/row")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/n, "B/row")
}

// cpuTime returns the CPU time the process has used, user and system.
func cpuTime(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// memSource is a source of one collection held in memory, rows shaped like a
// product table's rows as JSON. Each snapshot it opens is at a later position.
type memSource struct {
	collection string
	docs       []snapshot.Document // in id byte order
	lsn        uint64
}

func newMemSource(collection string, rows int) *memSource {
	s := &memSource{collection: collection, docs: make([]snapshot.Document, rows)}
	for i := range rows {
		g := i + 1
		body := fmt.Sprintf(`{"id":%d,"sku":"SKU-%08d","title":"Item %d %016x%016x%016x%016x","price":%d.%02d,"qty":%d,"active":%t,`+
			`"tags":["t%d","c%d"],"attrs":{"color":"c%d","note":"%016x%016x","size":%d},`+
			`"created_at":"2025-01-01T00:00:00+00:00","updated_at":"2026-01-01T00:00:00+00:00"}`,
			g, g, g, g*31, g*37, g*41, g*43, g%100000/100, g%100, g%1000, g%7 != 0,
			g%10, g%33, g%17, g*47, g*53, g%5)
		s.docs[i] = snapshot.Document{ID: strconv.Itoa(g), Body: []byte(body)}
	}
	slices.SortFunc(s.docs, func(a, b snapshot.Document) int { return strings.Compare(a.ID, b.ID) })
	return s
}

func (s *memSource) Collections() []string { return []string{s.collection} }

func (s *memSource) Open(context.Context) (snapshot.SourceSnapshot, error) {
	s.lsn++
	return &memSnapshot{src: s, pos: snapshot.Position{LSN: s.lsn}}, nil
}

// memSnapshot is one read of a memSource.
type memSnapshot struct {
	src *memSource
	pos snapshot.Position
}

func (m *memSnapshot) Position() snapshot.Position { return m.pos }

func (m *memSnapshot) Scan(ctx context.Context, collection string, fn func(snapshot.Document) error) error {
	_, err := m.ScanSince(ctx, collection, nil, fn)
	return err
}

// ScanSince renders every row: a memSource cannot tell what changed.
func (m *memSnapshot) ScanSince(ctx context.Context, collection string, _ *snapshot.Position, fn func(snapshot.Document) error) (snapshot.LayerMode, error) {
	if collection != m.src.collection {
		return snapshot.LayerMode{}, fmt.Errorf("no collection %q", collection)
	}
	for _, d := range m.src.docs {
		if err := fn(d); err != nil {
			return snapshot.LayerMode{}, err
		}
	}
	return snapshot.ContentMode("held in memory"), ctx.Err()
}

func (m *memSnapshot) Close(context.Context) error { return nil }
