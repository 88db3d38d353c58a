package layer

import (
	"bufio"
	"bytes"
	"cmp"
	"container/heap"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"

	"github.com/snapflip/snapflip/index"
	"github.com/snapflip/snapflip/snapshot"
)

// spillBytes is how many bytes of entries the packers of one collection's indexes
// hold in memory, together, before each sorts its own and spills them to a temporary
// file (os.TempDir, unlinked as soon as made), so that a base of any size packs its
// indexes in bounded memory.
const spillBytes = 64 << 20

// entryOverhead is what a held entry costs beyond its bytes (its string header).
const entryOverhead = 16

// packer collects the entries of one index of a base layer (or a full copy), in any
// order and from any goroutine, and writes them, sorted, in blocks (index.Packer) once
// every document is in. Entries past spillBytes are sorted and spilled to temporary
// files, merged when the blocks are written.
type packer struct {
	stored  string // the index's collection (index.Collection)
	spillAt int    // spillBytes when 0

	mu      sync.Mutex
	held    []string
	size    int
	spills  []*os.File
	entries int64
}

// add holds one entry.
func (p *packer) add(entry string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = append(p.held, entry)
	p.entries++
	if p.size += len(entry) + entryOverhead; p.size >= cmp.Or(p.spillAt, spillBytes) {
		return p.spill()
	}
	return nil
}

// spill sorts the held entries into a temporary file.
func (p *packer) spill() error {
	f, err := os.CreateTemp("", "snapflip-index-*")
	if err != nil {
		return fmt.Errorf("spill the entries of %s: %w", p.stored, err)
	}
	// Unlinked at once: the file lives while it is open, and no failure leaves it.
	_ = os.Remove(f.Name())
	p.spills = append(p.spills, f)
	slices.Sort(p.held)
	w := bufio.NewWriterSize(f, 1<<20)
	var n [binary.MaxVarintLen64]byte
	for _, e := range p.held {
		if _, err := w.Write(n[:binary.PutUvarint(n[:], uint64(len(e)))]); err != nil {
			return fmt.Errorf("spill the entries of %s: %w", p.stored, err)
		}
		if _, err := w.WriteString(e); err != nil {
			return fmt.Errorf("spill the entries of %s: %w", p.stored, err)
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("spill the entries of %s: %w", p.stored, err)
	}
	p.held, p.size = nil, 0
	return nil
}

// packed is what a packer wrote: its blocks, the chunks of their directory, and the
// bytes of both (keys and bodies).
type packed struct {
	blocks, chunks, bytes int64
}

// write writes every entry held or spilled in blocks, in order, then the blocks'
// directory (index.AppendDirectory) as the index's run, and returns what it wrote. It
// closes the spilled files.
func (p *packer) write(ctx context.Context, w snapshot.DocumentWriter) (packed, error) {
	defer p.close()
	bw := &blockWriter{w: w, stored: p.stored}
	next, err := p.sorted()
	if err != nil {
		return bw.out, err
	}
	var pk index.Packer
	prev := ""
	for {
		e, ok, err := next()
		if err != nil {
			return bw.out, err
		}
		if !ok {
			break
		}
		if prev != "" && e <= prev {
			return bw.out, fmt.Errorf("%w: index %s: entry %q twice or out of order", snapshot.ErrDeltaInconsistent, p.stored, truncate(e, 200))
		}
		prev = e
		if key, body, full := pk.Add(e); full {
			if err := bw.block(ctx, key, body); err != nil {
				return bw.out, err
			}
		}
	}
	if key, body, ok := pk.Flush(); ok {
		if err := bw.block(ctx, key, body); err != nil {
			return bw.out, err
		}
	}
	return bw.out, bw.chunk(ctx)
}

// blockWriter writes an index's blocks, and their keys in directory chunks.
type blockWriter struct {
	w      snapshot.DocumentWriter
	stored string // the index's collection (index.Collection)
	dir    []byte // the directory chunk being filled
	out    packed
}

// block writes one block, and its key to the directory.
func (bw *blockWriter) block(ctx context.Context, key string, body []byte) error {
	bw.out.blocks++
	bw.out.bytes += int64(len(key) + len(body))
	if bw.dir = index.AppendDirectory(bw.dir, key); len(bw.dir) >= index.DirectoryChunkBytes {
		if err := bw.chunk(ctx); err != nil {
			return err
		}
	}
	return bw.w.Write(ctx, bw.stored, snapshot.Document{ID: key, Body: bytes.Clone(body)})
}

// chunk writes the directory chunk filled so far, if any, and starts the next.
func (bw *blockWriter) chunk(ctx context.Context) error {
	if len(bw.dir) == 0 {
		return nil
	}
	bw.out.bytes += int64(len(bw.dir))
	err := bw.w.WriteChunk(ctx, bw.stored, bw.out.chunks, bytes.Clone(bw.dir))
	bw.out.chunks++
	bw.dir = bw.dir[:0]
	return err
}

// sorted returns the entries in order, one a call, false at the end.
func (p *packer) sorted() (func() (string, bool, error), error) {
	slices.Sort(p.held)
	if len(p.spills) == 0 {
		i := 0
		return func() (string, bool, error) {
			if i == len(p.held) {
				return "", false, nil
			}
			i++
			return p.held[i-1], true, nil
		}, nil
	}
	if len(p.held) > 0 {
		if err := p.spill(); err != nil {
			return nil, err
		}
	}
	h := &runHeap{}
	for _, f := range p.spills {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, fmt.Errorf("read the spilled entries of %s: %w", p.stored, err)
		}
		r := &spillRun{r: bufio.NewReaderSize(f, 1<<20)}
		if err := r.next(); err != nil {
			return nil, fmt.Errorf("read the spilled entries of %s: %w", p.stored, err)
		}
		if r.ok {
			h.runs = append(h.runs, r)
		}
	}
	heap.Init(h)
	return func() (string, bool, error) {
		if len(h.runs) == 0 {
			return "", false, nil
		}
		r := h.runs[0]
		e := r.cur
		if err := r.next(); err != nil {
			return "", false, fmt.Errorf("read the spilled entries of %s: %w", p.stored, err)
		}
		if r.ok {
			heap.Fix(h, 0)
		} else {
			heap.Pop(h)
		}
		return e, true, nil
	}, nil
}

// close closes the spilled files (unlinked when made; a packer never closed leaves
// them to the garbage collector's finalizers).
func (p *packer) close() {
	for _, f := range p.spills {
		_ = f.Close()
	}
	p.spills, p.held = nil, nil
}

// spillRun reads one spilled file's entries in order.
type spillRun struct {
	r   *bufio.Reader
	cur string
	ok  bool
}

func (s *spillRun) next() error {
	n, err := binary.ReadUvarint(s.r)
	if err == io.EOF {
		s.ok = false
		return nil
	}
	if err != nil {
		return err
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(s.r, b); err != nil {
		return err
	}
	s.cur, s.ok = string(b), true
	return nil
}

// runHeap orders spilled runs by their current entry.
type runHeap struct{ runs []*spillRun }

func (h *runHeap) Len() int           { return len(h.runs) }
func (h *runHeap) Less(i, j int) bool { return h.runs[i].cur < h.runs[j].cur }
func (h *runHeap) Swap(i, j int)      { h.runs[i], h.runs[j] = h.runs[j], h.runs[i] }
func (h *runHeap) Push(x any)         { h.runs = append(h.runs, x.(*spillRun)) }
func (h *runHeap) Pop() any {
	r := h.runs[len(h.runs)-1]
	h.runs = h.runs[:len(h.runs)-1]
	return r
}
