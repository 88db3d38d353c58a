package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
)

// BenchmarkAPIChain measures cache-miss reads of the metadata API (cache off, every
// request a different id, as BenchmarkAPI's miss case) where the current version's
// chain is 1, 4 and 8 layers long: a base, then one delta per sync that changed a few
// rows (max_layers 8, rebase_ratio 100). Each chain is built on a fresh emulator
// and served by its own API process; the three are measured in turn, five times
// (each time in another order), keeping each one's best. Run it with -benchtime 1x.
func BenchmarkAPIChain(b *testing.B) {
	const rows, changedPerSync, conns = 20_000, 20, 32
	const dur, rounds = 3 * time.Second, 5
	lengths := []int{1, 4, 8}
	dsn := testenv.Postgres(b)
	loadItems(b, dsn, "items", rows)
	dir := b.TempDir()
	syncer := build(b, dir, "github.com/snapflip/snapflip/cmd/syncer")
	apiBin := build(b, dir, "github.com/snapflip/snapflip/cmd/metadata-api")
	cfg := writeConfig(b, dir, "chain", "items", "versions: incremental", "max_layers: 8", "rebase_ratio: 100")

	apis := map[int]string{}
	for _, k := range lengths {
		addr, stop := freshEmulator(b)
		defer stop()
		var last syncRun
		for i := range k {
			if i > 0 {
				testenv.Exec(b, dsn, fmt.Sprintf(`UPDATE items SET qty = qty + 1, updated_at = now()
					WHERE id IN (SELECT id FROM items ORDER BY random() LIMIT %d)`, changedPerSync))
			}
			last = publishOnce(b, syncer, cfg, dsn, addr)
		}
		if got := last.man.ChainLength(); got != k {
			b.Fatalf("after %d syncs the chain is %d layers long, want %d: %+v", k, got, k, last.man.Collections["items"].Layers)
		}
		if last.man.Rows() != rows {
			b.Fatalf("version %s holds %d rows, want %d", last.man.Version, last.man.Rows(), rows)
		}
		apis[k] = startAPI(b, apiBin, addr, anyCPU, "--cache-size", "-1")
	}

	// Misses: every request a different id, as in BenchmarkAPI.
	script := filepath.Join(dir, "miss.lua")
	lua := fmt.Sprintf("counter = 0\nrequest = function()\n  counter = counter + 7919\n  return wrk.format(\"GET\", \"/v1/data/items/\" .. (1 + counter %% %d))\nend\n", rows)
	if err := os.WriteFile(script, []byte(lua), 0o600); err != nil {
		b.Fatal(err)
	}
	for _, k := range lengths {
		wrk(b, conns, time.Second, anyCPU, apis[k], script) // warm up: connections, pointer, manifest
	}
	for range b.N {
		best := map[int]load{}
		all := map[int][]string{}
		for r := range rounds {
			for j := range lengths {
				k := lengths[(j+r)%len(lengths)] // each round in another order
				l := wrk(b, conns, dur, anyCPU, apis[k], script)
				if l.errors > 0 {
					b.Errorf("chain of %d: %d errors under load", k, l.errors)
				}
				all[k] = append(all[k], fmt.Sprintf("%.0f", l.rps))
				if l.rps > best[k].rps {
					best[k] = l
				}
			}
		}
		b.Logf("metadata API, cache miss (cache off), %d connections from wrk, %s each, best of %d; %d rows, %d changed per delta",
			conns, dur, rounds, rows, changedPerSync)
		for _, k := range lengths {
			ratio := best[k].rps / best[1].rps
			b.ReportMetric(best[k].rps, fmt.Sprintf("chain%d_req/s", k))
			b.ReportMetric(ms(best[k].p99), fmt.Sprintf("chain%d_p99_ms", k))
			note := ""
			if k > 1 {
				b.ReportMetric(ratio, fmt.Sprintf("chain%d/chain1", k))
				note = fmt.Sprintf("  (%.0f%% of a chain of 1", 100*ratio)
				if k == 8 {
					note += "; target >= 80%"
				}
				note += ")"
			}
			b.Logf("  chain of %d layer(s)  %s%s; every round: %s req/s", k, best[k], note, strings.Join(all[k], ", "))
			layers := "layers"
			if k == 1 {
				layers = "layer"
			}
			f := Figure{Measurement: fmt.Sprintf("cache-miss GET, chain of %d %s, %s rows, best of %d", k, layers, thousands(rows), rounds),
				Figure: fmt.Sprintf("%s req/s", thousands(best[k].rps))}
			if k > 1 {
				f.Figure += fmt.Sprintf(": %.0f%% of a chain of 1", 100*ratio)
			}
			if k == 8 {
				f.Target, f.Missed = "≥ 80% of a chain of 1", ratio < 0.8
			}
			record(b, f)
		}
	}
}
