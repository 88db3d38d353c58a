package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/rig"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
)

// BenchmarkBaseChunks builds the base of a 5,000,000-row table (BENCH_CHUNK_ROWS
// changes it) as `syncer run` reads one beside the stream (pgsource.OpenBase),
// written as a base layer into Bigtable's emulator, in chunks (the defaults:
// base_transaction 10 s, 250,000 rows a chunk) and in one transaction, in turn,
// twice each; then reads it alone, rendered and dropped, three times each way. It
// reports each way's time against the one transaction's (the median pair's
// ratios) and the longest transaction pg_stat_activity showed while a chunked base
// was built. Run it with -benchtime 1x.
func BenchmarkBaseChunks(b *testing.B) {
	rows := envInt(b, "BENCH_CHUNK_ROWS", 5_000_000)
	defaultEnv(b)
	big := pgsource.Collection{Name: "big", Table: "big", Key: "id"}
	r := rig.New(b, []pgsource.Collection{big}, `CREATE TABLE big (id bigint PRIMARY KEY, a int NOT NULL, note text)`,
		fmt.Sprintf(`INSERT INTO big SELECT g, g %% 1000, 'row ' || g FROM generate_series(1, %d) g`, rows), `VACUUM ANALYZE big`)
	src := r.Pub.Source.(*pgsource.Source)
	type run struct {
		took, longest time.Duration
		chunks        pgsource.BaseChunks
	}
	ctx := context.Background()
	// base reads the base (limit: base_transaction) and, with write, writes it as
	// a base layer.
	base := func(limit time.Duration, write bool) run {
		src.BaseTransaction = limit
		stop := longestTransaction(b, r.DSN)
		start := time.Now()
		snap, err := src.OpenBase(ctx, "big")
		if err != nil {
			b.Fatal(err)
		}
		n := int64(0)
		if write {
			// An emulator of its own, stopped after: it holds every row in memory.
			addr, emu := testenv.StartEmulator(b)
			defer func() { _ = emu.Process.Kill() }()
			w := &layer.Writer{Store: testenv.Store(b, testenv.StoreConfig(addr)), MaxDocumentBytes: 1 << 20}
			m := snapshot.Manifest{Dataset: "chunks", Version: r.Pub.Versions.Next(), State: snapshot.StateWriting, Format: snapshot.FormatLayered,
				Source: snap.Position(), StartedAt: start, Collections: map[string]snapshot.CollectionStats{}}
			res, err := w.WriteVersion(ctx, snapshot.WriteRequest{Snap: snap, Collections: []string{"big"}, Manifest: m, Base: true, Why: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			n = res.Collections["big"].Rows
		} else if _, err := snap.(snapshot.DeltaSnapshot).ScanSince(ctx, "big", nil, func(snapshot.Document) error { n++; return nil }); err != nil {
			b.Fatal(err)
		}
		out := run{took: time.Since(start), chunks: snap.(interface{ Chunks() pgsource.BaseChunks }).Chunks()}
		_ = snap.Close(ctx)
		out.longest = stop()
		if n != int64(rows) {
			b.Fatalf("%d rows of %d", n, rows)
		}
		return out
	}
	pairs := func(what string, n int, write bool) (ratio float64, chunked, whole run) {
		var ratios []float64
		for i := range n {
			c, w := base(0, write), base(-1, write)
			ratios = append(ratios, c.took.Seconds()/w.took.Seconds())
			b.Logf("%s, pair %d: chunked %.1f s (%d chunks, longest transaction %.1f s), one transaction %.1f s (longest %.1f s)",
				what, i+1, c.took.Seconds(), c.chunks.Chunks, c.longest.Seconds(), w.took.Seconds(), w.longest.Seconds())
			chunked.longest, whole.longest = max(chunked.longest, c.longest), max(whole.longest, w.longest)
			chunked.took, whole.took, chunked.chunks = chunked.took+c.took/time.Duration(n), whole.took+w.took/time.Duration(n), c.chunks
		}
		slices.Sort(ratios)
		return ratios[len(ratios)/2], chunked, whole
	}
	ratio, chunked, whole := pairs("base written", 2, true)
	readRatio, read, readWhole := pairs("read alone", 3, false)
	b.ReportMetric(ratio, "chunked/one_transaction")
	b.ReportMetric(chunked.longest.Seconds(), "longest_transaction_s")
	record(b, Figure{Measurement: fmt.Sprintf("a %s-row base read from the source beside the stream and written, in chunks (defaults: base_transaction 10 s, marks every 250,000 rows) against one transaction (the worse of 2 alternate pairs)", thousands(rows)),
		Figure: fmt.Sprintf("%.1f s vs %.1f s: %.2f× (%d chunks)", chunked.took.Seconds(), whole.took.Seconds(), ratio, chunked.chunks.Chunks), Target: "≤ 1.15×", Missed: ratio > 1.15})
	record(b, Figure{Measurement: fmt.Sprintf("the same %s-row base read alone, rendered and dropped, in chunks against one transaction (median of 3 alternate pairs): what the chunks cost the source read", thousands(rows)),
		Figure: fmt.Sprintf("%.1f s vs %.1f s: %.2f× (%d chunks)", read.took.Seconds(), readWhole.took.Seconds(), readRatio, read.chunks.Chunks)})
	record(b, Figure{Measurement: fmt.Sprintf("longest source transaction while a %s-row base is read beside the stream and written, from pg_stat_activity", thousands(rows)),
		Figure: fmt.Sprintf("%.1f s (in one transaction: %.1f s)", chunked.longest.Seconds(), whole.longest.Seconds()), Target: "≤ 10 s", Missed: chunked.longest > 10*time.Second})
}

// longestTransaction samples pg_stat_activity every 50 ms for the oldest open
// transaction of the database but its own, until the returned stop, which returns
// the longest seen.
func longestTransaction(tb testing.TB, dsn string) (stop func() time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	conn := testenv.Connect(tb, ctx, dsn)
	var mu sync.Mutex
	var longest time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var secs float64
			err := conn.QueryRow(ctx, `SELECT coalesce(max(extract(epoch FROM clock_timestamp() - xact_start)), 0)::float8
				FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL`).Scan(&secs)
			if err == nil {
				mu.Lock()
				longest = max(longest, time.Duration(secs*float64(time.Second)))
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() time.Duration {
		cancel()
		<-done
		_ = conn.Close(context.Background())
		mu.Lock()
		defer mu.Unlock()
		return longest
	}
}
