package client

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkReplicaGet: Get on a hit, at random among 100k documents held in memory
// (no API: the figure with the API is internal/bench's BenchmarkReplica).
func BenchmarkReplicaGet(b *testing.B) {
	const rows = 100_000
	docs := make(map[string]json.RawMessage, rows)
	for i := range rows {
		id := strconv.Itoa(i + 1)
		docs[id] = json.RawMessage(fmt.Sprintf(`{"id":%s,"pad":%q}`, id, strings.Repeat("x", 230)))
	}
	r := &Replica{}
	r.state.Store(&replicaState{version: "v", colls: replicaColls{{"items", newReplicaColl(docs, nil)}}})
	// The ids a caller asks for, in a random order, laid out one after the other as a
	// request's id would be at hand.
	ids := make([]string, 1<<16)
	for i := range ids {
		ids[i] = strings.Clone(strconv.Itoa(1 + rand.IntN(rows)))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, ok := r.Get("items", ids[i&(len(ids)-1)]); !ok {
			b.Fatal("missed")
		}
	}
}
