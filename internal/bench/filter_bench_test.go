package bench

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
)

// indexedItems is the items collection with two indexes: one field (numeric) and two
// (boolean, timestamptz). The filter benchmark reads the first.
const indexedItems = "{name: items, table: items, key: id, indexes: [price, [active, created_at]]}"

// envFilterRows names the variable that sets BenchmarkFilter's table size (rows, a
// multiple of 100,000 that divides 10,000,000); 1,000,000 when unset.
const envFilterRows = "BENCH_FILTER_ROWS"

// filterRows returns BenchmarkFilter's table size, and how many cents of price a
// range of 100 documents spans at that size (loadItems gives price (id % 100,000)/100,
// so each cent is rows/100,000 rows, spread over the whole id space).
func filterRows(tb testing.TB) (rows, width int) {
	tb.Helper()
	rows = 1_000_000
	if s := os.Getenv(envFilterRows); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 100_000 || n%100_000 != 0 || 100%(n/100_000) != 0 {
			tb.Fatalf("%s=%q: want a multiple of 100,000 that divides 10,000,000", envFilterRows, s)
		}
		rows = n
	}
	return rows, 100 / (rows / 100_000)
}

// priceRange is the k-th range of width cents, as the filter's two bounds.
func priceRange(k, width int) (from, to string) {
	cents := func(c int) string { return fmt.Sprintf("%d.%02d", c/100, c%100) }
	return cents(k * width), cents((k + 1) * width)
}

// filterPath is the filter of the prices in the k-th range: 100 documents.
func filterPath(k, width int) string {
	from, to := priceRange(k, width)
	return fmt.Sprintf("/v1/data/items?price=gte.%s&price=lt.%s&limit=100", from, to)
}

// pgFilterSQL is the same filter in Postgres, through its B-tree index on (price, id).
const pgFilterSQL = `SELECT id::text, to_json(t)::text FROM items t WHERE price >= $1 AND price < $2 ORDER BY t.price, t.id LIMIT 100`

// BenchmarkFilter measures queries by field over 1,000,000 rows (BENCH_FILTER_ROWS sets
// another size), the collection declaring two indexes, price and (active, created_at):
//   - a full sync with the two indexes against one without, alternately, twice, each on
//     a fresh emulator, keeping each one's fastest;
//   - on the emulator of the last sync with indexes, cold reads, one at a time: a filter
//     of the prices in a range that holds 100 documents (a different range each time,
//     the API's document cache off and its filter cache never hit), a plain list page of
//     100 (from a random id), and the same filter in Postgres through its B-tree index on
//     (price, id), over pgx, in turn;
//   - hot reads: one filter repeated by wrk at 32 connections against the API (its
//     default caches), and against a Go HTTP server answering it from Postgres
//     (internal/bench/pgfilter), alternately, twice, keeping each one's best;
//   - then a random 0.1% of the rows change price: the bytes the next version writes
//     against those the base wrote.
//
// Run it with -benchtime 1x.
func BenchmarkFilter(b *testing.B) {
	rows, width := filterRows(b)
	dsn := testenv.Postgres(b)
	loadItems(b, dsn, "items", rows)
	testenv.Exec(b, dsn, "ALTER TABLE items SET (autovacuum_enabled = false)")
	testenv.Exec(b, dsn, "CREATE INDEX items_price_id ON items (price, id)")
	testenv.Exec(b, dsn, "ANALYZE items")
	dir := b.TempDir()
	syncer := build(b, dir, "github.com/snapflip/snapflip/cmd/syncer")
	apiBin := build(b, dir, "github.com/snapflip/snapflip/cmd/metadata-api")
	pgfilter := build(b, dir, "github.com/snapflip/snapflip/internal/bench/pgfilter")
	plainCfg := writeConfig(b, dir, "plain", "items")
	indexedCfg := writeCollectionConfig(b, dir, "indexed", indexedItems)

	for range b.N {
		var plain, indexed, kept syncRun
		var addr string
		stop := func() {}
		for i := range 2 {
			stop()
			func() {
				a, s := freshEmulator(b)
				defer s()
				if p := publishOnce(b, syncer, plainCfg, dsn, a); i == 0 || p.took < plain.took {
					plain = p
				}
			}()
			addr, stop = freshEmulator(b)
			kept = publishOnce(b, syncer, indexedCfg, dsn, addr)
			checkIndexed(b, kept.man, rows)
			if i == 0 || kept.took < indexed.took {
				indexed = kept
			}
		}
		defer stop()
		recordIndexedSync(b, rows, plain, indexed)

		cold := coldFilterReads(b, filterEnv{rows: rows, width: width, dsn: dsn, addr: addr, apiBin: apiBin, version: kept.man.Version})
		recordColdFilter(b, rows, cold)
		hot := hotFilterReads(b, filterEnv{rows: rows, width: width, dsn: dsn, addr: addr, apiBin: apiBin, version: kept.man.Version}, pgfilter)
		recordHotFilter(b, hot)

		changed := rows / 1000
		testenv.Exec(b, dsn, fmt.Sprintf(`UPDATE items SET price = price + 0.01, qty = qty + 1, updated_at = now()
			WHERE id IN (SELECT id FROM items ORDER BY random() LIMIT %d)`, changed))
		delta := publishOnce(b, syncer, indexedCfg, dsn, addr)
		own := delta.man.Collections["items"].Own
		if own == nil || own.Kind != snapshot.LayerDelta || own.Changed != int64(changed) {
			b.Fatalf("the sync after %d rows changed did not write a delta of them: %+v", changed, own)
		}
		recordIndexedDelta(b, rows, kept, delta)
	}
}

// checkIndexed fails unless m's collection items is a base of rows documents with two
// indexes of rows entries each.
func checkIndexed(b *testing.B, m snapshot.Manifest, rows int) {
	b.Helper()
	c := m.Collections["items"]
	if len(c.Indexes) != 2 || c.Own == nil || c.Own.Kind != snapshot.LayerBase || len(c.Own.Indexes) != 2 || m.Rows() != int64(rows) {
		b.Fatalf("the sync with indexes did not write a base of %d rows with two indexes: %d rows, indexes %+v, layer %+v", rows, m.Rows(), c.Indexes, c.Own)
	}
	for _, iw := range c.Own.Indexes {
		if iw.Entries != int64(rows) {
			b.Fatalf("index %s: %d entries, want %d", iw.Name, iw.Entries, rows)
		}
	}
}

// indexBytes is what a layer's index entries and tombstones weigh, and their count.
func indexBytes(m snapshot.Manifest) (bytes, cells int64) {
	for _, iw := range m.Collections["items"].Own.Indexes {
		bytes += iw.Bytes
		cells += iw.Entries + iw.Removed
	}
	return bytes, cells
}

// recordIndexedSync records the full sync with two indexes against one without.
func recordIndexedSync(b *testing.B, rows int, plain, indexed syncRun) {
	ratio := indexed.took.Seconds() / plain.took.Seconds()
	ib, cells := indexBytes(indexed.man)
	b.ReportMetric(ratio, "sync_indexes/plain")
	b.Logf("full sync of %d rows, fastest of 2 each: with 2 indexes %.2f s (%s sent, of which %d index entries, %s; peak RSS %.0f MiB), without %.2f s (%s sent; peak RSS %.0f MiB): %.2f×",
		rows, indexed.took.Seconds(), sizeSI(indexed.man.BytesWritten), cells, sizeSI(ib), indexed.rssMiB,
		plain.took.Seconds(), sizeSI(plain.man.BytesWritten), plain.rssMiB, ratio)
	record(b, Figure{Measurement: fmt.Sprintf("full sync of %s rows with 2 indexes against none (`syncer once`, fastest of 2 alternate runs each)", thousands(rows)),
		Figure: fmt.Sprintf("%.2f s vs %.2f s: %.2f×; %s vs %s sent (%s index entries, %s)", indexed.took.Seconds(), plain.took.Seconds(), ratio,
			sizeSI(indexed.man.BytesWritten), sizeSI(plain.man.BytesWritten), thousands(cells), sizeSI(ib)),
		Target: "≤ 1.3×", Missed: ratio > 1.3})
}

// recordIndexedDelta records the bytes of the version after 0.1% of the rows changed
// against the base's.
func recordIndexedDelta(b *testing.B, rows int, base, delta syncRun) {
	share := float64(delta.man.BytesWritten) / float64(base.man.BytesWritten)
	db, dcells := indexBytes(delta.man)
	bb, _ := indexBytes(base.man)
	b.ReportMetric(100*share, "delta_bytes_%")
	b.Logf("0.1%% of %d rows changed price: the delta wrote %d bytes (%d index cells, %d bytes) against the base's %d (index entries %d bytes): %.3f%%; took %.2f s",
		rows, delta.man.BytesWritten, dcells, db, base.man.BytesWritten, bb, 100*share, delta.took.Seconds())
	record(b, Figure{Measurement: fmt.Sprintf("bytes a version writes when 0.1%% of %s rows change an indexed field, 2 indexes, against the base version", thousands(rows)),
		Figure: fmt.Sprintf("%s of %s (%.2f%%); index entries and tombstones %s (%s cells)", sizeSI(delta.man.BytesWritten), sizeSI(base.man.BytesWritten), 100*share,
			sizeSI(db), thousands(dcells)),
		Target: "≤ 1%", Missed: share > 0.01})
}

// filterEnv is what the read measurements need: the table's size and a range's
// width, Postgres, the emulator and the version it serves, and the API binary.
type filterEnv struct {
	rows, width int
	dsn, addr   string
	apiBin      string
	version     snapshot.Version
}

// coldResult is the cold reads' latencies, sorted, and the responses' sizes.
type coldResult struct {
	filter, list, pg       []time.Duration
	filterBytes, listBytes int
	buffers                string // Postgres's EXPLAIN of one filter: its buffers
}

// coldFilterReads times filters, list pages and Postgres's answers to the same
// filters one at a time, in turn (each round in another order), each filter a range
// not read before.
func coldFilterReads(b *testing.B, e filterEnv) coldResult {
	b.Helper()
	api := startAPI(b, e.apiBin, e.addr, anyCPU, "--cache-size", "-1")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Prepare(ctx, "filter", pgFilterSQL); err != nil {
		b.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) (int, int) {
		resp, err := client.Get(api + path)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		var page struct{ Documents []json.RawMessage }
		if err := json.Unmarshal(body, &page); err != nil {
			b.Fatalf("GET %s: %v", path, err)
		}
		return len(page.Documents), len(body)
	}
	ranges := 100_000 / e.width
	n := min(1000, ranges-1)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 35))
	order := rng.Perm(ranges)
	afters := tailIDs(e.rows)
	var r coldResult
	get(filterPath(order[ranges-1], e.width)) // warm up: connections, pointer, manifest
	sides := []func(i int){
		func(i int) {
			t := time.Now()
			docs, size := get(filterPath(order[i], e.width))
			r.filter = append(r.filter, time.Since(t))
			if docs != 100 {
				b.Fatalf("filter %s: %d documents, want 100", filterPath(order[i], e.width), docs)
			}
			r.filterBytes += size
		},
		func(int) {
			after := afters[rng.IntN(len(afters))]
			tok, _ := json.Marshal(map[string]string{"v": string(e.version), "c": "items", "a": after})
			t := time.Now()
			docs, size := get("/v1/data/items?limit=100&page_token=" + base64.RawURLEncoding.EncodeToString(tok))
			r.list = append(r.list, time.Since(t))
			if docs != 100 {
				b.Fatalf("list page after %s: %d documents, want 100", after, docs)
			}
			r.listBytes += size
		},
		func(i int) {
			from, to := priceRange(order[i], e.width)
			t := time.Now()
			docs := pgFilter(b, conn, from, to)
			r.pg = append(r.pg, time.Since(t))
			if docs != 100 {
				b.Fatalf("Postgres, prices in [%s, %s): %d rows, want 100", from, to, docs)
			}
		},
	}
	for i := range n {
		for j := range sides {
			sides[(i+j)%len(sides)](i)
		}
	}
	for _, s := range [][]time.Duration{r.filter, r.list, r.pg} {
		slices.Sort(s)
	}
	from, to := priceRange(order[0], e.width)
	r.buffers = explainBuffers(b, conn, from, to)
	return r
}

// tailIDs returns the ids of 1..rows that a list page of 100 can start after (100 or
// more ids follow them in byte order) with at most 300 ids after them. The emulator
// gathers and sorts every row of a read's range before it applies the read's limit
// (bttest's ReadRows), so a page read from the middle of 1,000,000 ids takes seconds
// there; Bigtable stops at the limit. Pages from the end of the collection cost the
// emulator no more than the page's own rows, as on Bigtable.
func tailIDs(rows int) []string {
	ids := make([]string, rows)
	for i := range ids {
		ids[i] = strconv.Itoa(i + 1)
	}
	slices.Sort(ids)
	return ids[max(0, rows-300):max(0, rows-100)]
}

// pgFilter reads the documents of the prices in [from, to) from Postgres and returns
// how many there are.
func pgFilter(b *testing.B, conn *pgx.Conn, from, to string) int {
	b.Helper()
	rows, err := conn.Query(context.Background(), "filter", from, to)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var id, doc string
		if err := rows.Scan(&id, &doc); err != nil {
			b.Fatal(err)
		}
		n++
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	return n
}

// explainBuffers returns the plan of Postgres's filter and the buffers it read.
func explainBuffers(b *testing.B, conn *pgx.Conn, from, to string) string {
	b.Helper()
	q := strings.NewReplacer("$1", "'"+from+"'", "$2", "'"+to+"'").Replace(pgFilterSQL)
	rows, err := conn.Query(context.Background(), "EXPLAIN (ANALYZE, BUFFERS) "+q)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			b.Fatal(err)
		}
		lines = append(lines, strings.TrimSpace(line))
	}
	return strings.Join(lines, "; ")
}

// recordColdFilter records the cold filter against the list page and Postgres.
func recordColdFilter(b *testing.B, rows int, r coldResult) {
	n := len(r.filter)
	fp50, fp99 := percentile(r.filter, 50), percentile(r.filter, 99)
	lp50, lp99 := percentile(r.list, 50), percentile(r.list, 99)
	pp50, pp99 := percentile(r.pg, 50), percentile(r.pg, 99)
	b.ReportMetric(ms(fp50), "cold_filter_p50_ms")
	b.ReportMetric(ms(fp50)/ms(lp50), "cold_filter/list_p50")
	b.ReportMetric(ms(fp99)/ms(lp99), "cold_filter/list_p99")
	b.ReportMetric(ms(fp50)/ms(pp50), "cold_filter/pg_p50")
	b.Logf("cold reads, one at a time, %d of each in turn, %d rows (filter: 101 index entries read, then 100 documents by id; list page: 101 documents read in one range)", n, rows)
	b.Logf("  filter of 100   p50 %.2f ms  p99 %.2f ms  (%d B a response)", ms(fp50), ms(fp99), r.filterBytes/n)
	b.Logf("  list page of 100 p50 %.2f ms  p99 %.2f ms  (%d B a response)", ms(lp50), ms(lp99), r.listBytes/n)
	b.Logf("  Postgres (pgx)  p50 %.2f ms  p99 %.2f ms  (%s)", ms(pp50), ms(pp99), r.buffers)
	p50, p99 := ms(fp50)/ms(lp50), ms(fp99)/ms(lp99)
	record(b, Figure{Measurement: fmt.Sprintf("filter returning 100 of %s documents, cold (cache off, a new range each time), against a list page of 100, %d of each in turn", thousands(rows), n),
		Figure: fmt.Sprintf("p50 %.2f ms, p99 %.2f ms against p50 %.2f ms, p99 %.2f ms: %.2f× / %.2f×", ms(fp50), ms(fp99), ms(lp50), ms(lp99), p50, p99),
		Target: "≤ 1.5×", Missed: p50 > 1.5 || p99 > 1.5})
	record(b, Figure{Measurement: "the same filters answered by Postgres through a B-tree index on (price, id), pgx, in the same turns",
		Figure: fmt.Sprintf("p50 %.2f ms, p99 %.2f ms: the API takes %.1f× / %.1f×", ms(pp50), ms(pp99), ms(fp50)/ms(pp50), ms(fp99)/ms(pp99))})
}

// hotResult is the hot filter's best load runs, and every run's rate.
type hotResult struct {
	api, pg       load
	apiAll, pgAll []string
	conns, pool   int
}

// hotFilterReads measures one filter repeated at 32 connections from wrk, against the
// API with its default caches and against pgfilter over Postgres, in turn, twice.
func hotFilterReads(b *testing.B, e filterEnv, pgfilter string) hotResult {
	b.Helper()
	const conns, pool, dur = 32, 4, 5 * time.Second
	api := startAPI(b, e.apiBin, e.addr, anyCPU)
	cmd := exec.Command(pgfilter, "-dsn", e.dsn, "-conns", strconv.Itoa(pool))
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	// Stopped when the reads end: the syncs measured next wait for every other
	// session of the database to end (pgActive).
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line := make([]byte, 64)
	n, _ := out.Read(line)
	pg := "http://" + strings.TrimSpace(string(line[:n]))
	path := filterPath(0, e.width)
	for _, base := range []string{api, pg} {
		wrk(b, conns, time.Second, anyCPU, base+path, "") // warm up: connections, caches
	}
	r := hotResult{conns: conns, pool: pool}
	for i := range 4 {
		if (i%2 == 0) == (i < 2) {
			l := wrk(b, conns, dur, anyCPU, api+path, "")
			r.apiAll = append(r.apiAll, fmt.Sprintf("%.0f", l.rps))
			if l.rps > r.api.rps {
				r.api = l
			}
		} else {
			l := wrk(b, conns, dur, anyCPU, pg+path, "")
			r.pgAll = append(r.pgAll, fmt.Sprintf("%.0f", l.rps))
			if l.rps > r.pg.rps {
				r.pg = l
			}
		}
	}
	if r.api.errors+r.pg.errors > 0 {
		b.Errorf("errors under load: API %d, Postgres %d", r.api.errors, r.pg.errors)
	}
	return r
}

// recordHotFilter records the hot filter against Postgres.
func recordHotFilter(b *testing.B, r hotResult) {
	ratio := r.api.rps / r.pg.rps
	b.ReportMetric(r.api.rps, "hot_filter_req/s")
	b.ReportMetric(ratio, "hot_filter/pg")
	b.Logf("hot filter (one query of 100 documents repeated), wrk at %d connections, best of 2 each (API, Postgres, Postgres, API)", r.conns)
	b.Logf("  API, default caches              %s; every run: %s req/s", r.api, strings.Join(r.apiAll, ", "))
	b.Logf("  Postgres behind pgfilter (%d conns) %s; every run: %s req/s", r.pool, r.pg, strings.Join(r.pgAll, ", "))
	record(b, Figure{Measurement: fmt.Sprintf("hot filter (the same 100-document query repeated), wrk at %d connections, against Postgres through its B-tree behind a Go HTTP server (%d connections), best of 2 alternate runs each", r.conns, r.pool),
		Figure: fmt.Sprintf("%s req/s (p99 %.2f ms) against %s req/s (p99 %.2f ms): %.2f×", thousands(r.api.rps), ms(r.api.p99), thousands(r.pg.rps), ms(r.pg.p99), ratio),
		Target: "≥ 1.0×", Missed: ratio < 1.0})
}
