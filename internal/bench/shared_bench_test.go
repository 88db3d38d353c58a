package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/rig"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// BenchmarkBaseShared adds a 1,000,000-row collection (BENCH_SHARED_ROWS changes
// it) to a dataset, whose base `syncer run` reads beside the stream shared by two
// replicas, in parts of 100,000 ids, into Bigtable's emulator. The builder waits at
// its first part until the other replica has read every other part, so that each
// replica's rate is measured alone (the machine's two cores would blur two at
// once): the other replica's, reading parts from the source and writing them; and
// the builder's, taking those parts from storage into the base. Docs/operations.md
// sizes N replicas from these rates. Run it with -benchtime 1x.
func BenchmarkBaseShared(b *testing.B) {
	rows := envInt(b, "BENCH_SHARED_ROWS", 1_000_000)
	const part = 100_000
	defaultEnv(b)
	items := pgsource.Collection{Name: "items", Table: "items", Key: "id"}
	big := pgsource.Collection{Name: "big", Table: "big", Key: "id"}
	r := rig.New(b, []pgsource.Collection{items}, `CREATE TABLE items (id int PRIMARY KEY, n int)`, `INSERT INTO items VALUES (1, 1)`,
		`CREATE TABLE big (id bigint PRIMARY KEY, a int NOT NULL, note text)`,
		fmt.Sprintf(`INSERT INTO big SELECT g, g %% 1000, 'row ' || g FROM generate_series(1, %d) g`, rows), `VACUUM ANALYZE big`)
	r.Pub.Incremental = true
	r.Publish(b, r.Pub)
	open := func() *pgsource.Source {
		s, err := pgsource.New(r.DSN, []pgsource.Collection{items, big})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close(context.Background()) })
		return s
	}
	r.Pub.Source = open()
	parts := func(holder string) *layer.Parts {
		return &layer.Parts{Rows: part, Marks: r.Store.Cells(), Lease: func(name string, before func(context.Context, uint64) error) (snapshot.Lease, error) {
			return r.Store.NewLease(name, store.LeaseConfig{Holder: holder, BeforeAcquire: before})
		}}
	}
	var taken atomic.Int64
	var firstTake, lastTake time.Time
	var mu sync.Mutex
	r.Writer.Observer = snapshot.ObserverFunc(func(_ context.Context, e snapshot.Event) {
		if e.Kind == snapshot.EventBasePartTaken {
			taken.Add(e.Attr("rows").(int64))
			mu.Lock()
			if firstTake.IsZero() {
				firstTake = time.Now()
			}
			lastTake = time.Now()
			mu.Unlock()
		}
	})
	gate := &rig.KillingSource{Source: r.Pub.Source, FirstPart: make(chan struct{})}
	c, stop := r.StartCompactor(gate)
	defer func() { stop(); c.Wait() }()
	c.Parts = parts("syncer-1")
	other := &rig.KillingSource{Source: open()}
	reader := &layer.PartReader{Dataset: rig.Dataset, Source: other, Records: r.Store, Syncer: "syncer-2", Parts: parts("syncer-2"),
		Versions: snapshot.NewVersionGen(uuid.New(), nil), Writer: &layer.Writer{Store: r.Store, MaxDocumentBytes: 1 << 20}}

	began := time.Now()
	r.Publish(b, r.Pub) // big waits for its base
	awaitPlan(b, r.Store, "big")
	readStart, readCPU := time.Now(), cpuTime(b)
	if _, err := reader.Once(context.Background()); err != nil {
		b.Fatal(err)
	}
	readTook, readCPU := time.Since(readStart), cpuTime(b)-readCPU
	n, otherRows := reader.PartsRead()
	close(gate.FirstPart)
	builderStart, takeCPU := time.Now(), cpuTime(b)
	c.Wait()
	builderTook, takeCPU := time.Since(builderStart), cpuTime(b)-takeCPU
	testenv.Exec(b, r.DSN, `UPDATE items SET n = n + 1`)
	if m := r.Publish(b, r.Pub); m.Collections["big"].Rows != int64(rows) {
		b.Fatalf("the version after the base holds %d rows of big; want %d", m.Collections["big"].Rows, rows)
	}
	if taken.Load() != otherRows || n == 0 {
		b.Fatalf("the other replica read %d parts, %d rows; the builder took %d", n, otherRows, taken.Load())
	}
	readRate := float64(otherRows) / readTook.Seconds()
	mu.Lock()
	takeRate := float64(taken.Load()) / lastTake.Sub(firstTake).Seconds() // about: the first part taken is not timed
	mu.Unlock()
	own := gate.Rows.Load()
	readUS := float64(readCPU.Microseconds()) / float64(otherRows)
	takeUS := float64(takeCPU.Microseconds()) / float64(rows)
	b.ReportMetric(readRate, "read_rows/s")
	b.ReportMetric(takeRate, "take_rows/s")
	b.ReportMetric(readUS, "read_cpu_µs/row")
	b.ReportMetric(takeUS, "take_cpu_µs/row")
	b.Logf("%d rows in %d parts; the other replica read %d of them (%d rows) in %.1f s: %.0f rows/s, %.2f µs of its CPU a row; "+
		"the builder read %d itself and took the rest in %.1f s (takes at %.0f rows/s), %.2f µs of its CPU a row; %.1f s in all",
		rows, rows/part, n, otherRows, readTook.Seconds(), readRate, readUS, own, builderTook.Seconds(), takeRate, takeUS, time.Since(began).Seconds())
	record(b, Figure{Measurement: fmt.Sprintf("a base of %s rows shared by two replicas, each alone: a replica reading parts from the source into the emulator; the builder taking them from storage (the syncer's own CPU a row)", thousands(rows)),
		Figure: fmt.Sprintf("reads %s rows/s (%.1f µs); takes %s rows/s (%.1f µs)", thousands(int(readRate)), readUS, thousands(int(takeRate)), takeUS)})
}

// cpuTime is the CPU this process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// awaitPlan waits until the collection's base record names its parts.
func awaitPlan(b *testing.B, st *store.Store, collection string) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		recs, err := st.ListBases(context.Background(), rig.Dataset)
		if err != nil {
			b.Fatal(err)
		}
		for _, rec := range recs {
			if rec.Collection == collection && rec.Plan != "" && rec.State == "building" {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatal("the base's record never named its parts")
}
