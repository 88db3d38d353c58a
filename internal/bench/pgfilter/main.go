// Command pgfilter is the filter benchmark's baseline: an HTTP server whose one route
// answers the benchmark's filter, a range of prices, from Postgres through its own
// B-tree index on (price, id), with the list page's shape and the metadata API's
// headers, and does nothing else. It prints its address on stdout.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
)

// query is the filter the route answers: the documents of the table whose price is in
// [$1, $2), in (price, id) order, as the syncer renders them.
const query = `SELECT id::text, to_json(t)::text FROM %s t WHERE price >= $1 AND price < $2 ORDER BY t.price, t.id LIMIT $3`

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	dsn := flag.String("dsn", "", "the Postgres DSN")
	table := flag.String("table", "items", "the table")
	conns := flag.Int("conns", 4, "connections to Postgres, each prepared with the query")
	flag.Parse()
	sql := fmt.Sprintf(query, *table)
	pool := make(chan *pgx.Conn, *conns)
	for range *conns {
		conn, err := pgx.Connect(context.Background(), *dsn)
		if err != nil {
			fail(err)
		}
		if _, err := conn.Prepare(context.Background(), "filter", sql); err != nil {
			fail(err)
		}
		pool <- conn
	}
	r := chi.NewRouter()
	r.Get("/v1/data/{collection}", func(w http.ResponseWriter, r *http.Request) {
		from, to, limit, ok := params(r)
		if !ok {
			http.Error(w, "want price=gte.X&price=lt.Y&limit=N", http.StatusBadRequest)
			return
		}
		conn := <-pool
		defer func() { pool <- conn }()
		// Not the request's context: pgx closes a connection whose query is cancelled,
		// and wrk drops its connections, requests in flight, when it stops.
		rows, err := conn.Query(context.Background(), "filter", from, to, limit)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer rows.Close()
		var b strings.Builder
		b.WriteString(`{"version":"postgres","documents":[`)
		for n := 0; rows.Next(); n++ {
			var id, doc string
			if err := rows.Scan(&id, &doc); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			if n > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"id":"` + id + `","document":` + doc + `}`)
		}
		if err := rows.Err(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		b.WriteString("]}\n")
		w.Header().Set("Snapshot-Version", "7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1763737200000")
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
		_, _ = w.Write([]byte(b.String()))
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fail(err)
	}
	fmt.Println(ln.Addr().String())
	_ = http.Serve(ln, r)
}

// params reads price=gte.X&price=lt.Y&limit=N.
func params(r *http.Request) (from, to string, limit int, ok bool) {
	q := r.URL.Query()
	for _, v := range q["price"] {
		if s, found := strings.CutPrefix(v, "gte."); found {
			from = s
		} else if s, found := strings.CutPrefix(v, "lt."); found {
			to = s
		}
	}
	limit, err := strconv.Atoi(q.Get("limit"))
	return from, to, limit, err == nil && from != "" && to != ""
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
