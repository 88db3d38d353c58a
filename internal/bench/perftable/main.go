// Command perftable prints the table of figures `make bench` ends with, from the
// figures the benchmarks recorded, in the format of docs/performance.md; with -docs it
// also writes the table into that file, between its markers.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/internal/bench"
	"github.com/snapflip/snapflip/internal/testenv"
)

func main() {
	figures := flag.String("figures", os.Getenv(bench.EnvFigures), "the file of figures the benchmarks recorded")
	docs := flag.String("docs", "", "also write the table into this file (docs/performance.md), between its markers")
	flag.Parse()
	if err := run(*figures, *docs); err != nil {
		fmt.Fprintln(os.Stderr, "perftable:", err)
		os.Exit(1)
	}
}

func run(figures, docs string) error {
	f, err := os.Open(figures)
	if err != nil {
		return fmt.Errorf("no figures recorded: %w", err)
	}
	figs, err := bench.ReadFigures(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("read %s: %w", figures, err)
	}
	if len(figs) == 0 {
		return fmt.Errorf("no figures recorded in %s", figures)
	}
	block := bench.Table(machine(), bench.Rows(figs))
	fmt.Print("\n" + block)
	if docs == "" {
		return nil
	}
	doc, err := os.ReadFile(docs)
	if err != nil {
		return err
	}
	out, err := bench.ReplaceTable(doc, block)
	if err != nil {
		return fmt.Errorf("%s: %w", docs, err)
	}
	if err := os.WriteFile(docs, out, 0o644); err != nil {
		return err
	}
	fmt.Printf("\n(written to %s)\n", docs)
	return nil
}

// machine describes where the figures were measured: the CPU, its cores, memory, the
// Go release and the Postgres server's version (from the DSN the benchmarks used).
func machine() string {
	cpu, mem := "unknown CPU", "unknown memory"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
					mem = fmt.Sprintf("%.1f GiB of memory", kb/(1<<20))
				}
			}
		}
	}
	return fmt.Sprintf("%s, %d cores, %s; %s; PostgreSQL %s", cpu, runtime.NumCPU(), mem, runtime.Version(), postgresVersion())
}

// postgresVersion asks the server at testenv.EnvPostgres for its version.
func postgresVersion() string {
	dsn := os.Getenv(testenv.EnvPostgres)
	if dsn == "" {
		return "(version unknown: " + testenv.EnvPostgres + " is not set)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "(version unknown: " + err.Error() + ")"
	}
	defer conn.Close(ctx)
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "(version unknown: " + err.Error() + ")"
	}
	return v
}
