// Command mincopy is the benchmarks' baseline: the least a sync could do. It streams
// (id, to_json(row)) pairs from Postgres with pgx and writes them to Bigtable with
// ApplyBulk, batched and with the same parallelism as the syncer, and nothing else: no
// manifest, digest, validation or pointer. It also measures the parts alone.
//
//	mincopy -mode copy   stream from Postgres and write (the baseline)
//	mincopy -mode read   stream from Postgres only
//	mincopy -mode write  write -rows generated documents of -bytes each
//	mincopy -mode naive  stream -rows rows and write each with its own Apply
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	mode := flag.String("mode", "copy", "copy, read, write or naive")
	dsn := flag.String("dsn", "", "Postgres DSN")
	emulator := flag.String("emulator", os.Getenv("BIGTABLE_EMULATOR_HOST"), "emulator host:port")
	table := flag.String("table", "items", "source table (key column id)")
	rows := flag.Int("rows", 0, "write/naive: rows to write (0: all)")
	docBytes := flag.Int("bytes", 345, "write: bytes per generated document")
	batchRows := flag.Int("batch-rows", 1000, "rows per ApplyBulk")
	batchBytes := flag.Int("batch-bytes", 4<<20, "bytes per ApplyBulk")
	writers := flag.Int("writers", 8, "ApplyBulk calls in flight")
	flag.Parse()
	start := time.Now()
	n, err := run(context.Background(), *mode, *dsn, *emulator, *table, *rows, *docBytes, *batchRows, *batchBytes, *writers)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mincopy:", err)
		os.Exit(1)
	}
	fmt.Printf("%s %d rows in %s\n", *mode, n, time.Since(start))
}

type batch struct {
	keys []string
	muts []*bigtable.Mutation
}

func run(ctx context.Context, mode, dsn, emulator, table string, limit, docBytes, batchRows, batchBytes, writers int) (int, error) {
	var tbl *bigtable.Table
	if mode != "read" {
		conn, err := grpc.NewClient(emulator, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(256<<20), grpc.MaxCallRecvMsgSize(256<<20)))
		if err != nil {
			return 0, err
		}
		client, err := bigtable.NewClientWithConfig(ctx, "local", "local",
			bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}, DisableSession: true}, option.WithGRPCConn(conn))
		if err != nil {
			return 0, err
		}
		defer client.Close()
		tbl = client.Open("snapflip")
	}
	ts := bigtable.Now()
	// The same row keys as the syncer writes: d#<dataset>#<uuid>-<millis>#<collection>#<id>.
	prefix := fmt.Sprintf("d#bench#%s-%d#items#", uuid.New(), time.Now().UnixMilli())

	// The writers: Writers ApplyBulk calls in flight, fed by a bounded channel.
	batches := make(chan batch, writers)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				errs, err := tbl.ApplyBulk(ctx, b.keys, b.muts)
				if err == nil && errs != nil {
					err = fmt.Errorf("%d row errors", len(errs))
				}
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
			}
		}()
	}
	var cur batch
	curBytes := 0
	emit := func(id string, doc []byte) {
		m := bigtable.NewMutation()
		m.Set("d", "v", ts, doc)
		cur.keys = append(cur.keys, prefix+id)
		cur.muts = append(cur.muts, m)
		curBytes += len(doc) + len(prefix) + len(id)
		if len(cur.keys) >= batchRows || curBytes >= batchBytes {
			batches <- cur
			cur, curBytes = batch{}, 0
		}
	}
	n := 0
	switch mode {
	case "write":
		doc := []byte(`{"pad": "` + strings.Repeat("x", max(docBytes-12, 0)) + `"}`)
		for i := range limit {
			emit(fmt.Sprint(i), doc)
			n++
		}
	case "copy", "read", "naive":
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return 0, err
		}
		defer conn.Close(ctx)
		q := "SELECT (t.id)::text, to_json(t.*)::text FROM " + pgx.Identifier{table}.Sanitize() + " AS t ORDER BY t.id"
		if limit > 0 {
			q += fmt.Sprintf(" LIMIT %d", limit)
		}
		rs, err := conn.Query(ctx, q)
		if err != nil {
			return 0, err
		}
		for rs.Next() {
			v := rs.RawValues()
			id, doc := string(v[0]), append([]byte(nil), v[1]...)
			n++
			switch mode {
			case "copy":
				emit(id, doc)
			case "naive":
				m := bigtable.NewMutation()
				m.Set("d", "v", ts, doc)
				if err := tbl.Apply(ctx, prefix+id, m); err != nil {
					return n, err
				}
			}
		}
		if err := rs.Err(); err != nil {
			return n, err
		}
	default:
		return 0, fmt.Errorf("unknown mode %q", mode)
	}
	if len(cur.keys) > 0 {
		batches <- cur
	}
	close(batches)
	wg.Wait()
	return n, firstErr
}
