package index

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A base layer (or a full copy) holds every entry of an index, so it writes them
// sorted and packed into blocks, one stored row each, instead of a row per entry: an
// index then costs a base a row per BlockEntries documents, not a row per document.
// A block's row is keyed by its last entry, so the blocks of a span are the rows from
// the span's start on, up to the first whose key reaches the span's end. A delta
// writes entries and tombstones one row each, as before.
//
// A block's body is blockMark, then each entry as the length it shares with the one
// before (uvarint), the length of the rest (uvarint) and the rest. No entry's or
// tombstone's body starts with blockMark, so a body says which it is.
const blockMark = 0x00

// BlockEntries is how many entries a block holds at most; BlockBytes bounds its
// body's size, whichever comes first.
const (
	BlockEntries = 256
	BlockBytes   = 32 << 10
)

// IsBlock reports whether a stored body is a block of entries.
func IsBlock(body []byte) bool { return len(body) > 0 && body[0] == blockMark }

// Packer packs sorted entries into blocks.
type Packer struct {
	body []byte
	prev string
	n    int
}

// Add appends an entry, which must sort after the previous one, and returns a block
// when one is full (its key, its last entry; and its body, valid until the next call).
func (p *Packer) Add(entry string) (key string, body []byte, full bool) {
	if p.n == 0 {
		p.body, p.prev = append(p.body[:0], blockMark), "" // a block decodes alone
	}
	shared := 0
	for shared < len(p.prev) && shared < len(entry) && p.prev[shared] == entry[shared] {
		shared++
	}
	p.body = binary.AppendUvarint(p.body, uint64(shared))
	p.body = binary.AppendUvarint(p.body, uint64(len(entry)-shared))
	p.body = append(p.body, entry[shared:]...)
	p.prev = entry
	p.n++
	if p.n < BlockEntries && len(p.body) < BlockBytes {
		return "", nil, false
	}
	return p.Flush()
}

// Flush returns the block of the entries added since the last one, if any.
func (p *Packer) Flush() (key string, body []byte, ok bool) {
	if p.n == 0 {
		return "", nil, false
	}
	p.n = 0
	return p.prev, p.body, true
}

// errBlock is a block that does not decode.
var errBlock = errors.New("a block of index entries does not decode")

// BlockEntriesOf returns the entries of a block, in order.
func BlockEntriesOf(body []byte) ([]string, error) {
	if !IsBlock(body) {
		return nil, fmt.Errorf("%w: no block mark", errBlock)
	}
	var out []string
	prev := ""
	for b := body[1:]; len(b) > 0; {
		shared, n := binary.Uvarint(b)
		if n <= 0 || shared > uint64(len(prev)) {
			return nil, fmt.Errorf("%w: entry %d", errBlock, len(out))
		}
		b = b[n:]
		rest, n := binary.Uvarint(b)
		if n <= 0 || rest > uint64(len(b)-n) {
			return nil, fmt.Errorf("%w: entry %d", errBlock, len(out))
		}
		b = b[n:]
		e := prev[:shared] + string(b[:rest])
		b = b[rest:]
		out = append(out, e)
		prev = e
	}
	return out, nil
}

// A packed layer also writes its blocks' keys, in order, as the run of the index's
// collection: a directory a reader binary-searches for the blocks of a span, then
// reads those rows by key, instead of scanning from the span's start to the first
// block past its end. DirectoryChunkBytes bounds one chunk of it.
const DirectoryChunkBytes = 64 << 10

// AppendDirectory appends one block key to a directory chunk.
func AppendDirectory(chunk []byte, key string) []byte {
	chunk = binary.AppendUvarint(chunk, uint64(len(key)))
	return append(chunk, key...)
}

// DirectoryKeys appends the block keys of a directory chunk to keys.
func DirectoryKeys(keys []string, chunk []byte) ([]string, error) {
	for b := chunk; len(b) > 0; {
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return keys, fmt.Errorf("%w: a directory chunk is cut after %d keys", errBlock, len(keys))
		}
		keys = append(keys, string(b[w:w+int(n)]))
		b = b[w+int(n):]
	}
	return keys, nil
}
