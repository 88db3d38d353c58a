package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
)

// BenchmarkLogicalPinned pins a dataset (a rollback) while pgbench writes at full
// speed, with watch.mode logical and every default but an hourly schedule: 4 clients
// updating random rows of pgbench_accounts (scale 1, 100,000 rows) for
// SNAPFLIP_BENCH_PIN_SECONDS (600), then 20 s more with no writes. Each second it
// samples the syncer's resident memory and the WAL the slot retains; the bounds are
// watch.hold_bytes (64 MiB) over the syncer's memory before the pin and watch.hold_wal
// (256 MiB) plus the 15 s of WAL a slot's restart position may lag. Then it unpins and
// checks that the first version covering every commit holds every account exactly as
// Postgres does. Run it with -benchtime 1x.
func BenchmarkLogicalPinned(b *testing.B) {
	seconds := 600
	if v, err := strconv.Atoi(os.Getenv("SNAPFLIP_BENCH_PIN_SECONDS")); err == nil && v > 0 {
		seconds = v
	}
	defaultEnv(b)
	dsn, bin := pgbenchInit(b, 1)
	dir := b.TempDir()
	script := filepath.Join(dir, "update.sql")
	if err := os.WriteFile(script, []byte("\\set aid random(1, 100000)\nUPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	syncer := build(b, dir, "github.com/snapflip/snapflip/cmd/syncer")
	apiBin := build(b, dir, "github.com/snapflip/snapflip/cmd/metadata-api")
	settings := logicalSettings(b, dsn)
	slot := slotOf(settings)
	cfg := pgbenchConfig(b, dir, settings)
	for range b.N {
		addr, stop := freshEmulator(b)
		b.Cleanup(stop)
		sp := startSyncerRun(b, syncer, cfg, dsn, addr)
		waitStreaming(b, sp, dsn, slot, 10*time.Minute)
		api := startAPI(b, apiBin, addr, anyCPU)
		published := func() float64 { return scrape(sp.metrics).sum("snapflip_syncs_total", `result="published"`) }
		testenv.Exec(b, dsn, `UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = 1`)
		waitUntil(b, time.Minute, "a second version", func() bool { return published() >= 2 }, sp.logTail)
		admin := func(args ...string) {
			cmd := exec.Command(syncer, append([]string{"--config", cfg}, args...)...)
			cmd.Env = append(os.Environ(), "SNAPFLIP_POSTGRES_DSN="+dsn, "BIGTABLE_EMULATOR_HOST="+addr)
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("syncer %v: %v\n%s", args, err, out)
			}
		}
		admin("rollback", "--previous", "--reason", "pinned under load")
		before := rssMiB(sp.cmd.Process.Pid)

		var mu sync.Mutex
		var peakRSS float64
		var peakWAL int64
		done := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
				}
				rss := rssMiB(sp.cmd.Process.Pid)
				_, retained, _ := slotState(b, dsn, slot)
				mu.Lock()
				peakRSS, peakWAL = max(peakRSS, rss), max(peakWAL, retained)
				mu.Unlock()
			}
		}()
		tps := pgbenchTPS(b, bin, dsn, "-c", "4", "-j", "2", "-T", strconv.Itoa(seconds), "-n", "-f", script)
		time.Sleep(20 * time.Second) // what the reader still decodes, and holds, after the writes
		close(done)
		<-sampled
		letGo := scrape(sp.metrics).sum("snapflip_watch_held_transactions", `state="let_go"`)
		admin("unpin", "--reason", "the investigation is over")

		var token string
		queryRow(b, dsn, `SELECT 's:' || pg_current_snapshot()::text`, &token)
		version := awaitToken(b, api, "/v1/data/accounts/1", token, 10*time.Minute)
		want := stack.SourceDocs(b, dsn, `SELECT aid::text, to_json(t)::text FROM pgbench_accounts t`)
		got := listAll(b, api, "accounts", version)
		wrong := 0
		for id, doc := range want {
			if got[id] != doc {
				wrong++
			}
		}
		if wrong > 0 || len(got) != len(want) {
			b.Fatalf("after the unpin, version %s holds %d accounts, %d of %d unlike Postgres's\n%s", version, len(got), wrong, len(want), sp.logTail())
		}
		sp.stop()
		memBound, walBound := before+128, int64(256<<20)+int64(15*tps*250) // 250 bytes of WAL a transaction, at most
		b.Logf("pinned %d s under pgbench at %.0f tps: syncer RSS %.0f MiB before, peak %.0f MiB; slot retained at most %.1f MiB; %.0f transactions let go; after the unpin every account served as Postgres holds it",
			seconds, tps, before, peakRSS, float64(peakWAL)/(1<<20), letGo)
		record(b, Figure{Measurement: fmt.Sprintf("`syncer run` resident memory, dataset pinned %d s while pgbench updates random rows at full speed (4 clients, %.0f tps), watch.mode logical", seconds, tps),
			Figure: fmt.Sprintf("peak %.0f MiB (%.0f MiB before the pin)", peakRSS, before),
			Target: "≤ before + 2 × watch.hold_bytes (128 MiB: the collector lets the heap reach twice what is live)", Missed: peakRSS > memBound})
		record(b, Figure{Measurement: fmt.Sprintf("WAL the slot retains over that pin (%d s)", seconds),
			Figure: fmt.Sprintf("at most %.0f MiB; after the unpin, all 100,000 accounts served as Postgres holds them", float64(peakWAL)/(1<<20)),
			Target: "≤ watch.hold_wal (256 MiB) + 15 s of WAL", Missed: peakWAL > walBound})
	}
}

// rssMiB is a process's resident set now (VmRSS), in MiB; 0 if unknown.
func rssMiB(pid int) float64 { return procStatusMiB(pid, "VmRSS:") }

// awaitToken reads path with Snapshot-After: token until it is answered 200, and
// returns the version that answered.
func awaitToken(tb testing.TB, api, path, token string, limit time.Duration) string {
	tb.Helper()
	client := &http.Client{Timeout: 15 * time.Second}
	var version string
	err := testenv.Poll(limit, func() error {
		req, err := http.NewRequest(http.MethodGet, api+path, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Snapshot-After", token)
		req.Header.Set("Prefer", "wait=10")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s with token %s: %d", path, token, resp.StatusCode)
		}
		version = resp.Header.Get("Snapshot-Version")
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return version
}

// listAll reads every document of a collection in version, by id.
func listAll(tb testing.TB, api, collection, version string) map[string]string {
	tb.Helper()
	docs := map[string]string{}
	token := ""
	for {
		u := api + "/v1/data/" + collection + "?limit=1000&version=" + version
		if token != "" {
			u = api + "/v1/data/" + collection + "?limit=1000&page_token=" + token
		}
		resp, err := http.Get(u)
		if err != nil {
			tb.Fatal(err)
		}
		var page struct {
			Documents []struct {
				ID  string          `json:"id"`
				Doc json.RawMessage `json:"document"`
			} `json:"documents"`
			Next string `json:"next_page_token"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			tb.Fatalf("list %s: %d %v", collection, resp.StatusCode, err)
		}
		for _, d := range page.Documents {
			docs[d.ID] = string(d.Doc)
		}
		if page.Next == "" {
			return docs
		}
		token = page.Next
	}
}
