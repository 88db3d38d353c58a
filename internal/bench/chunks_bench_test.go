package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
)

// BenchmarkBaseChunks reads the base of a 5,000,000-row table (BENCH_CHUNK_ROWS
// changes it) as `syncer run` reads one beside the stream (pgsource.OpenBase), in
// chunks (base_transaction default) and in one transaction, in turn, three times
// each, every document rendered and dropped. It reports the chunked read's time
// against the one transaction's (the median of the pairs' ratios), and the longest
// transaction pg_stat_activity showed during each kind of read. Run it with
// -benchtime 1x.
func BenchmarkBaseChunks(b *testing.B) {
	rows := envInt(b, "BENCH_CHUNK_ROWS", 5_000_000)
	dsn := testenv.Postgres(b)
	testenv.Exec(b, dsn, `CREATE TABLE big (id bigint PRIMARY KEY, a int NOT NULL, note text)`,
		fmt.Sprintf(`INSERT INTO big SELECT g, g %% 1000, 'row ' || g FROM generate_series(1, %d) g`, rows),
		`VACUUM ANALYZE big`)
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "big", Table: "big"}})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close(context.Background())
	type run struct {
		took, longest time.Duration
		chunks        pgsource.BaseChunks
	}
	read := func(limit time.Duration) run {
		src.BaseTransaction = limit
		stop := longestTransaction(b, dsn)
		start := time.Now()
		ctx := context.Background()
		snap, err := src.OpenBase(ctx, "big")
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		if _, err := snap.(snapshot.DeltaSnapshot).ScanSince(ctx, "big", nil, func(snapshot.Document) error { n++; return nil }); err != nil {
			b.Fatal(err)
		}
		r := run{took: time.Since(start), chunks: snap.(interface{ Chunks() pgsource.BaseChunks }).Chunks()}
		_ = snap.Close(ctx)
		r.longest = stop()
		if n != rows {
			b.Fatalf("read %d rows of %d", n, rows)
		}
		return r
	}
	var ratios []float64
	var chunked, whole run
	for i := range 3 {
		c, w := read(0), read(-1)
		ratios = append(ratios, c.took.Seconds()/w.took.Seconds())
		b.Logf("pair %d: chunked %.1f s (%d chunks, longest transaction %.1f s), one transaction %.1f s (longest %.1f s)",
			i+1, c.took.Seconds(), c.chunks.Chunks, c.longest.Seconds(), w.took.Seconds(), w.longest.Seconds())
		chunked.longest, whole.longest = max(chunked.longest, c.longest), max(whole.longest, w.longest)
		chunked.took, whole.took, chunked.chunks = chunked.took+c.took, whole.took+w.took, c.chunks
	}
	slices.Sort(ratios)
	ratio := ratios[1]
	b.ReportMetric(ratio, "chunked/one_transaction")
	b.ReportMetric(chunked.longest.Seconds(), "longest_transaction_s")
	record(b, Figure{Measurement: fmt.Sprintf("a %s-row base read from the source in chunks (base_transaction 10 s) against one transaction, rendered and dropped (median of 3 alternate pairs)", thousands(rows)),
		Figure: fmt.Sprintf("%.1f s vs %.1f s a read: %.2f× (%d chunks)", chunked.took.Seconds()/3, whole.took.Seconds()/3, ratio, chunked.chunks.Chunks), Target: "≤ 1.15×", Missed: ratio > 1.15})
	record(b, Figure{Measurement: fmt.Sprintf("longest source transaction while a %s-row base is read beside the stream, from pg_stat_activity (in one transaction: %.1f s)", thousands(rows), whole.longest.Seconds()),
		Figure: fmt.Sprintf("%.1f s", chunked.longest.Seconds()), Target: "≤ 10 s", Missed: chunked.longest > 10*time.Second})
}

// longestTransaction samples pg_stat_activity every 50 ms for the oldest open
// transaction of the database but its own, until the returned stop, which returns
// the longest seen.
func longestTransaction(tb testing.TB, dsn string) (stop func() time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Fatal(err)
	}
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
