package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/rig"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
)

// BenchmarkBaseResume adds a 3,000,000-row collection (BENCH_RESUME_ROWS changes
// it) to a dataset, whose base `syncer run` reads from the source beside the stream
// in chunks (base_transaction default, unpaced), into Bigtable's emulator; the
// syncer's Compactor is stopped at half the base's rows, and a new one goes on with
// it. It reports the rows the source sent in all against the collection's, and the
// time from the restart until the base was built. Run it with -benchtime 1x.
func BenchmarkBaseResume(b *testing.B) {
	rows := envInt(b, "BENCH_RESUME_ROWS", 3_000_000)
	defaultEnv(b)
	items := pgsource.Collection{Name: "items", Table: "items", Key: "id"}
	r := rig.New(b, []pgsource.Collection{items}, `CREATE TABLE items (id int PRIMARY KEY, n int)`, `INSERT INTO items VALUES (1, 1)`,
		`CREATE TABLE big (id bigint PRIMARY KEY, a int NOT NULL, note text)`,
		fmt.Sprintf(`INSERT INTO big SELECT g, g %% 1000, 'row ' || g FROM generate_series(1, %d) g`, rows), `VACUUM ANALYZE big`)
	r.Pub.Incremental = true
	r.Publish(b, r.Pub)

	both, err := pgsource.New(r.DSN, []pgsource.Collection{items, {Name: "big", Table: "big", Key: "id"}})
	if err != nil {
		b.Fatal(err)
	}
	defer both.Close(context.Background())
	r.Pub.Source = both
	src := &rig.KillingSource{Source: both, KillAt: int64(rows / 2)}
	var resumedAt string
	r.Writer.Observer = snapshot.ObserverFunc(func(_ context.Context, e snapshot.Event) {
		if e.Kind == snapshot.EventBaseResumed {
			resumedAt = fmt.Sprint(e.Attrs...)
		}
	})
	c1, kill := r.StartCompactor(src)
	src.Kill = kill
	began := time.Now()
	r.Publish(b, r.Pub) // big waits for its base
	c1.Wait()
	killed, before := time.Since(began), src.Rows.Load()

	c2, stop := r.StartCompactor(src)
	defer func() { stop(); c2.Wait() }()
	restarted := time.Now()
	testenv.Exec(b, r.DSN, `UPDATE items SET n = n + 1`)
	r.Publish(b, r.Pub)
	c2.Wait()
	rest := time.Since(restarted)
	testenv.Exec(b, r.DSN, `UPDATE items SET n = n + 1`)
	m := r.Publish(b, r.Pub)
	if got := m.Collections["big"].Rows; got != int64(rows) {
		b.Fatalf("the version after the base holds %d rows of big; want %d", got, rows)
	}
	if resumedAt == "" {
		b.Fatalf("the base was read again from the start")
	}
	read := src.Rows.Load()
	ratio := float64(read) / float64(rows)
	b.ReportMetric(ratio, "rows_read/rows")
	b.Logf("killed after %d rows (%.1f s); resumed (%s) and built in %.1f s more; %d rows read from the source in all: %.3f×",
		before, killed.Seconds(), resumedAt, rest.Seconds(), read, ratio)
	record(b, Figure{Measurement: fmt.Sprintf("rows the source sent for a %s-row base read beside the stream in chunks, its syncer stopped at half and another going on with it", thousands(rows)),
		Figure: fmt.Sprintf("%s rows: %.3f× (before the stop %.0f s, after it %.0f s)", thousands(int(read)), ratio, killed.Seconds(), rest.Seconds()),
		Target: "≤ 1.1×", Missed: ratio > 1.1})
}
