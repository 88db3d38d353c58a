// Command barechi is the API benchmark's baseline: a bare chi router whose one route
// writes a fixed document with the same headers as the metadata API, and does nothing
// else. It prints its address on stdout.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"

	"github.com/go-chi/chi/v5"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	body := flag.String("body", `{"id":"x"}`, "the document to serve")
	flag.Parse()
	b := []byte(*body)
	r := chi.NewRouter()
	r.Get("/v1/data/{collection}/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Snapshot-Version", "7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1763737200000")
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("ETag", `"0123456789abcdef"`)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		_, _ = w.Write(b)
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().String())
	_ = http.Serve(ln, r)
}
