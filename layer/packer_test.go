package layer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/snapflip/snapflip/index"
	"github.com/snapflip/snapflip/snapshot"
)

// blockSink is a snapshot.DocumentWriter that keeps what is written.
type blockSink struct {
	snapshot.DocumentWriter
	docs   []snapshot.Document
	chunks [][]byte
}

func (s *blockSink) Write(_ context.Context, _ string, d snapshot.Document) error {
	s.docs = append(s.docs, d)
	return nil
}

func (s *blockSink) WriteChunk(_ context.Context, _ string, n int64, chunk []byte) error {
	if n != int64(len(s.chunks)) {
		return fmt.Errorf("chunk %d after %d", n, len(s.chunks))
	}
	s.chunks = append(s.chunks, chunk)
	return nil
}

// A packer given entries in any order, from several goroutines, writes them sorted in
// blocks, in memory or spilled to files and merged, and refuses an entry given twice.
// Its spilled files are never seen in the temporary directory: unlinked when made.
func TestPackerSortsAndSpills(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	leftInTmp := func(when string) {
		t.Helper()
		if left, _ := os.ReadDir(tmp); len(left) > 0 {
			t.Errorf("%s: %d files in the temporary directory, such as %s", when, len(left), left[0].Name())
		}
	}
	for _, tc := range []struct {
		name    string
		n       int
		spillAt int
		spills  bool
	}{{"empty", 0, 0, false}, {"in memory", 5000, 0, false}, {"spilled", 5000, 4 << 10, true}, {"one spill", 300, 300 * 20, true}} {
		t.Run(tc.name, func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(uint64(tc.n), 7))
			var want []string
			for i := range tc.n {
				want = append(want, index.EntryID(fmt.Appendf(nil, "v%d", rnd.IntN(50)), fmt.Sprint(i)))
			}
			p := &packer{stored: "c/i", spillAt: tc.spillAt}
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					for i := g; i < len(want); i += 4 {
						if err := p.add(want[i]); err != nil {
							t.Error(err)
						}
					}
				})
			}
			wg.Wait()
			if spilled := len(p.spills) > 0; spilled != tc.spills {
				t.Errorf("spilled %d files; want spills %v", len(p.spills), tc.spills)
			}
			leftInTmp("after the spills")
			sink := &blockSink{}
			out, err := p.write(context.Background(), sink)
			if err != nil {
				t.Fatal(err)
			}
			leftInTmp("after the blocks were written")
			var got, keys, dir []string
			var size int64
			for _, c := range sink.chunks {
				if dir, err = index.DirectoryKeys(dir, c); err != nil {
					t.Fatal(err)
				}
				size += int64(len(c))
			}
			for _, d := range sink.docs {
				keys = append(keys, d.ID)
				es, err := index.BlockEntriesOf(d.Body)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, es...)
				size += int64(len(d.ID) + len(d.Body))
			}
			slices.Sort(want)
			if !slices.Equal(got, want) || p.entries != int64(len(want)) {
				t.Fatalf("%d entries back of %d (counted %d)", len(got), len(want), p.entries)
			}
			if out.blocks != int64(len(sink.docs)) || out.bytes != size || out.blocks != int64((len(want)+index.BlockEntries-1)/index.BlockEntries) {
				t.Errorf("%+v counted; %d blocks, %d bytes with the directory, written", out, len(sink.docs), size)
			}
			// The directory names every block, in order.
			if !slices.Equal(dir, keys) || out.chunks != int64(len(sink.chunks)) {
				t.Errorf("the directory holds %d keys in %d chunks (%d counted) for %d blocks", len(dir), len(sink.chunks), out.chunks, len(keys))
			}
		})
	}
	p := &packer{stored: "c/i", spillAt: 64}
	for range 2 {
		for _, e := range []string{"b\x00x", "a\x00x", "c\x00x"} {
			if err := p.add(e); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := p.write(context.Background(), &blockSink{}); err == nil {
		t.Error("entries given twice were packed")
	}
}

// A packer whose spill finds no room fails the add, naming the index and the file
// system's error, rather than keep every entry in memory.
func TestPackerSpillFailureNamesTheIndex(t *testing.T) {
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing"))
	p := &packer{stored: "orders/by_price", spillAt: 1 << 10}
	defer p.close()
	var err error
	for i := 0; err == nil && i < 1000; i++ {
		err = p.add(index.EntryID([]byte(fmt.Sprint(i)), fmt.Sprint(i)))
	}
	if err == nil || !strings.Contains(err.Error(), "orders/by_price") || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("adds past the budget with no temporary directory = %v; want an error naming the index and the missing directory", err)
	}
}
