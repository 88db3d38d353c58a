package pgsource

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/snapshot"
)

// A base read beside the stream in chunks (docs/design.md, "Bases in chunks"). A
// base of a large table read in one REPEATABLE READ transaction holds that
// transaction open for as long as the read takes, and while it is open vacuum keeps
// every row version newer than its snapshot, in every table of the database. So a
// base whose ids an index streams in byte order (digitScans) is read in chunks of
// that order, each in a transaction of its own that ends once it has been open half
// of BaseTransaction or has sent BaseChunkRows rows, the next starting after the
// last id sent. A chunk's scans run on connections that import its snapshot,
// closed to stop them where they stand. Every BaseMarkRows rows, and at each chunk's
// end, the read says where it stands (OnChunk), so that a read stopped goes on
// from there: fewer, longer chunks cost less than a transaction begun and its scans
// started every BaseMarkRows rows.
//
// The base's position is the first chunk's snapshot. A row a later chunk reads
// either did not change after that snapshot, and reads as it did then, or it
// changed, and the version that takes the base reads it again: the catch-up since
// the base's position finds every row changed after it (row versions newer than its
// snapshot, or the stream's key log), deletions included. So the base and its
// catch-up equal one snapshot at the version's position, as a base read in one
// transaction does. A row a later chunk finds behind the last id sent was inserted
// after the base's position: it is left to the catch-up too.

// DefaultBaseTransaction is the longest a base read beside the stream holds a source
// transaction open.
const DefaultBaseTransaction = 10 * time.Second

// DefaultBaseChunkRows is how many rows a chunk of a base read beside the stream
// holds at most: a chunk ends by time first unless rows come faster than about
// 800,000 a second.
const DefaultBaseChunkRows = 4_000_000

// DefaultBaseMarkRows is how often, in rows, a base read in chunks says where it
// stands: what a kill makes it read again.
const DefaultBaseMarkRows = 250_000

// errChunkEnd ends a chunk's scan: its transaction has been open long enough.
var errChunkEnd = errors.New("the chunk's transaction has been open long enough")

// BaseChunks says how a base read beside the stream was read.
type BaseChunks struct {
	// Chunks is how many transactions read it; 1 for a base read in one.
	Chunks int
	// Longest is the longest any of them was open while the base was read.
	Longest time.Duration
	// Whole says why the base was read in one transaction; "" when it was chunked.
	Whole string
}

// chunkedBase is a base's snapshot that reads its collection in chunks: the first
// chunk's snapshot, whose position and indexes are the base's, and the chunks after
// it.
type chunkedBase struct {
	*snap
	limit   time.Duration
	began   time.Time // when the first chunk's transaction began
	indexes []snapshot.IndexDef

	// after and ranges, for a base resumed (ResumeBase) or a part of one
	// (ReadBasePart), are the last id an earlier read sent and the ranges of the
	// collection's ids; "" and nil otherwise. through, for a part, is its last id.
	after   string
	through string
	ranges  []idRange
	onChunk func(ctx context.Context, last string) error

	mu     sync.Mutex
	chunks BaseChunks
	cur    *snap // the chunk being read after the first; nil between them
}

var _ snapshot.ChunkedSnapshot = (*chunkedBase)(nil)

// OnChunk sets fn, called as each chunk but the last ends and every BaseMarkRows
// rows within one (snapshot.ChunkedSnapshot).
func (b *chunkedBase) OnChunk(fn func(ctx context.Context, last string) error) { b.onChunk = fn }

// chunked wraps first, a base's snapshot of collection that began at began, to read
// in chunks, its indexes read in it now.
func (s *Source) chunked(ctx context.Context, first *snap, collection string, began time.Time) (*chunkedBase, error) {
	ix, err := first.Indexes(ctx, collection)
	if err != nil {
		return nil, err
	}
	limit := s.BaseTransaction
	if limit == 0 {
		limit = DefaultBaseTransaction
	}
	return &chunkedBase{snap: first, limit: limit, began: began, indexes: ix}, nil
}

// Indexes returns the collection's indexes as the first chunk read them.
func (b *chunkedBase) Indexes(ctx context.Context, collection string) ([]snapshot.IndexDef, error) {
	if _, err := b.read(collection); err != nil {
		return nil, err
	}
	return b.indexes, nil
}

// Chunks says how the base was read, so far.
func (b *chunkedBase) Chunks() BaseChunks {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.chunks
}

// ScanSince streams the collection in id byte order in chunks, when since is nil and
// its ids are read in index scans; otherwise in the first chunk's transaction alone.
func (b *chunkedBase) ScanSince(ctx context.Context, collection string, since *snapshot.Position, fn func(snapshot.Document) error) (snapshot.LayerMode, error) {
	cr, err := b.read(collection)
	if err != nil {
		return snapshot.LayerMode{}, err
	}
	var ranges []idRange
	why := "the base is read against an earlier position"
	switch {
	case since != nil:
	case b.ranges != nil:
		plan, err := b.changeMode(ctx, cr, nil)
		if err != nil {
			return snapshot.LayerMode{}, fmt.Errorf("collection %s: %w", collection, err)
		}
		return snapshotMode(plan.mode), b.scanChunks(ctx, cr, rangesThrough(rangesAfter(b.ranges, b.after), b.through), b.after, fn)
	case b.limit < 0:
		why = "chunks are off (base_transaction is negative)"
	default:
		if ranges, err = b.digitScans(ctx, cr); err != nil {
			return snapshot.LayerMode{}, err
		}
		why = "its ids are not one integer column of an indexed table of enough rows, which chunks need to read in byte order"
	}
	if len(ranges) == 0 {
		mode, err := b.snap.ScanSince(ctx, collection, since, fn)
		b.count(b.began, why)
		return mode, err
	}
	plan, err := b.changeMode(ctx, cr, nil)
	if err != nil {
		return snapshot.LayerMode{}, fmt.Errorf("collection %s: %w", collection, err)
	}
	return snapshotMode(plan.mode), b.scanChunks(ctx, cr, ranges, "", fn)
}

// scanChunks reads ranges in chunks, the first in the first chunk's transaction,
// sending the ids after after (all, for "").
func (b *chunkedBase) scanChunks(ctx context.Context, cr *collectionRead, ranges []idRange, after string, fn func(snapshot.Document) error) error {
	q := idQuery{cr: cr, sel: docSQL, from: rowsFromSQL(cr.c)}
	last, sent := after, after != "" // the last id sent
	most, mark := cmp.Or(b.src.BaseChunkRows, DefaultBaseChunkRows), cmp.Or(b.src.BaseMarkRows, DefaultBaseMarkRows)
	sinceMark := 0
	sn, began := b.snap, b.began
	for len(ranges) > 0 {
		rowsIn := 0
		rows, err := sn.importedScans(ctx, q, ranges)
		if rows == nil && err == nil {
			err = fmt.Errorf("%w: the scans of %s could not import the chunk's snapshot", snapshot.ErrSource, describe(cr.c))
		}
		var watchdog *time.Timer
		if err == nil {
			watchdog = b.watch(sn, rows, began)
		}
		if err == nil {
			err = readRows(rows, cr.c, cr.key, true, func(d snapshot.Document) error {
				if sent && d.ID <= last {
					return nil // inserted after the base's position: the catch-up reads it
				}
				last, sent = d.ID, true
				if err := fn(d); err != nil {
					return err
				}
				rowsIn++
				if rowsIn == most || (rowsIn%timeEvery == 0 && time.Since(began) >= b.limit/2) {
					return errChunkEnd
				}
				if sinceMark++; sinceMark == mark && b.onChunk != nil {
					// Where the base stands, said within the chunk: its transaction
					// stays open while what was sent is flushed.
					sinceMark = 0
					return b.onChunk(ctx, last)
				}
				return nil
			})
		}
		if watchdog != nil && !watchdog.Stop() {
			err = fmt.Errorf("a chunk of the base of %s was held open longer than base_transaction (%s): its transactions were ended", describe(cr.c), b.limit)
		}
		b.ended(sn, began)
		if !errors.Is(err, errChunkEnd) {
			return err
		}
		if ranges = rangesAfter(ranges, last); len(ranges) == 0 {
			return nil
		}
		if b.onChunk != nil {
			sinceMark = 0
			if err := b.onChunk(ctx, last); err != nil {
				return err
			}
		}
		if sn, began, err = b.next(ctx, cr); err != nil {
			return err
		}
	}
	b.ended(sn, began)
	return nil
}

// watch ends the chunk's transactions, sn's and its scans', once they have been
// open BaseTransaction since began: a reader stalled that long (a store write that
// does not return) has their connections closed, so that Postgres ends them rather
// than hold back vacuum, and the base fails (a query cancel would not reach a
// backend waiting to send rows, nor a timeout of Postgres's own).
func (b *chunkedBase) watch(sn *snap, rows *mergedRows, began time.Time) *time.Timer {
	conns := append([]*pgx.Conn{sn.conn}, rows.conns...)
	return time.AfterFunc(b.limit-time.Since(began), func() {
		for _, c := range conns {
			_ = c.PgConn().Conn().Close()
		}
	})
}

// count counts a transaction that read the base, begun at began; whole says why it
// read all of it, if it did.
func (b *chunkedBase) count(began time.Time, whole string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.chunks.Chunks++
	b.chunks.Longest = max(b.chunks.Longest, time.Since(began))
	b.chunks.Whole = whole
}

// ended counts the chunk read in sn, begun at began, and ends its transaction.
func (b *chunkedBase) ended(sn *snap, began time.Time) {
	b.count(began, "")
	b.mu.Lock()
	b.cur = nil
	b.mu.Unlock()
	ctx, cancel := snapshot.Detach(context.Background(), closeTimeout)
	defer cancel()
	_ = sn.Close(ctx)
}

// next begins the next chunk's transaction, the collection's definition still the
// first chunk's.
func (b *chunkedBase) next(ctx context.Context, cr *collectionRead) (*snap, time.Time, error) {
	began := time.Now()
	conn, born, tx, err := b.src.begin(ctx)
	if err != nil {
		return nil, began, err
	}
	sn := &snap{src: b.src, conn: conn, born: born, tx: tx, pos: b.pos, reads: map[string]*collectionRead{cr.c.Name: cr}, extra: map[int]*pgx.Conn{}}
	b.mu.Lock()
	b.cur = sn
	b.mu.Unlock()
	if want := b.pos.Definitions[cr.c.Name]; want != "" {
		cols, err := tableDefinitions(ctx, tx, cr.c)
		if err == nil && definitionsOf(cols) != want {
			err = fmt.Errorf("%w: the definition of %s changed while its base was read", snapshot.ErrSource, describe(cr.c))
		}
		if err != nil {
			b.ended(sn, began)
			return nil, began, err
		}
	}
	return sn, began, nil
}

// Close ends the chunk being read, if any, and the first chunk's snapshot.
func (b *chunkedBase) Close(ctx context.Context) error {
	b.mu.Lock()
	cur := b.cur
	b.cur = nil
	b.mu.Unlock()
	if cur != nil {
		_ = cur.Close(ctx)
	}
	return b.snap.Close(ctx)
}

// timeEvery is how many rows a chunk sends between looks at the clock.
const timeEvery = 64

// rangesAfter returns what is left of ranges after the id last, in byte order: the
// ids of each whose text sorts after last.
func rangesAfter(ranges []idRange, last string) []idRange {
	var out []idRange
	for _, rg := range ranges {
		if rg = rg.after(last); rg.lo <= rg.hi {
			out = append(out, rg)
		}
	}
	return out
}

// rangesThrough returns what is left of ranges up to the id through, in byte order:
// the ids of each whose text sorts no later; all of them for "".
func rangesThrough(ranges []idRange, through string) []idRange {
	if through == "" {
		return ranges
	}
	var out []idRange
	for _, rg := range ranges {
		if rg = rg.through(through); rg.lo <= rg.hi {
			out = append(out, rg)
		}
	}
	return out
}

// through returns the ids of rg whose text sorts no later than last's bytes: those
// rg.after(last) leaves out.
func (rg idRange) through(last string) idRange {
	past := rg.after(last)
	switch {
	case past.lo > past.hi:
		return rg
	case rg.desc:
		return idRange{lo: past.hi + 1, hi: rg.hi, desc: true}
	default:
		return idRange{lo: rg.lo, hi: past.lo - 1}
	}
}

// after returns the ids of rg whose text sorts after last's bytes: in rg's order
// their texts sort as bytes, so they are the ids past the first such one, found by
// a binary search (lo > hi when there is none).
func (rg idRange) after(last string) idRange {
	past := func(v int64) bool { return strconv.FormatInt(v, 10) > last }
	if !rg.desc {
		// The least v in lo..hi that is past; past is false below it.
		lo, hi := rg.lo, rg.hi
		if !past(hi) {
			return idRange{lo: 1, hi: 0, desc: rg.desc}
		}
		for lo < hi {
			mid := lo + (hi-lo)/2
			if past(mid) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		return idRange{lo: lo, hi: rg.hi}
	}
	// Descending: the greatest v in lo..hi that is past; past is false above it.
	lo, hi := rg.lo, rg.hi
	if !past(lo) {
		return idRange{lo: 1, hi: 0, desc: rg.desc}
	}
	for lo < hi {
		mid := hi - (hi-lo)/2
		if past(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return idRange{lo: rg.lo, hi: hi, desc: true}
}

var (
	_ snapshot.BaseSharer     = (*Source)(nil)
	_ snapshot.PartedSnapshot = (*chunkedBase)(nil)
)

// ReadBasePart opens a snapshot that reads collection's ids after after through
// through, in chunks, as the base read at at (snapshot.BaseSharer): a part of a
// base another snapshot cut (BaseParts). It fails as ResumeBase does.
func (s *Source) ReadBasePart(ctx context.Context, collection string, at snapshot.Position, after, through string) (snapshot.SourceSnapshot, error) {
	snap, err := s.ResumeBase(ctx, collection, at, after)
	if err != nil {
		return nil, err
	}
	snap.(*chunkedBase).through = through
	return snap, nil
}

// partSample is about how many ids BaseParts samples per part it cuts.
const partSample = 200

// BaseParts returns the ids that cut the collection into parts of about rows ids
// each, from a sample of the table's pages (snapshot.PartedSnapshot), and the
// base's mode. It cuts a counted table of more than rows rows whose ids are read in
// chunks, and only one read at its position (not a part, nor a resumed read).
func (b *chunkedBase) BaseParts(ctx context.Context, collection string, rows int64) ([]string, snapshot.LayerMode, error) {
	cr, err := b.read(collection)
	if err != nil {
		return nil, snapshot.LayerMode{}, err
	}
	plan, err := b.changeMode(ctx, cr, nil)
	if err != nil {
		return nil, snapshot.LayerMode{}, fmt.Errorf("collection %s: %w", collection, err)
	}
	mode := snapshotMode(plan.mode)
	if b.ranges != nil || b.limit < 0 || rows <= 0 || !cr.counted || cr.rows <= rows {
		return nil, mode, nil
	}
	ranges, err := b.digitScans(ctx, cr)
	if err != nil || len(ranges) == 0 {
		return nil, mode, err
	}
	parts := (cr.rows + rows - 1) / rows
	pct := min(100, 100*float64(parts*partSample)/float64(cr.rows))
	q := "SELECT " + keySQL(cr.key) + " FROM " + tableFromSQL(cr.c) + " TABLESAMPLE SYSTEM ($1)"
	rs, err := b.snap.tx.Query(ctx, q, pct)
	var ids []string
	if err == nil {
		ids, err = pgx.CollectRows(rs, pgx.RowTo[string])
	}
	if err != nil {
		return nil, mode, fmt.Errorf("sample the ids of %s: %w", describe(cr.c), err)
	}
	return cutsOf(ids, int(parts)), mode, nil
}

// cutsOf returns the ids that cut sample, sorted by their bytes, into parts of as
// many each: at most parts-1 of them, each once.
func cutsOf(sample []string, parts int) []string {
	slices.Sort(sample)
	var cuts []string
	for i := 1; i < parts; i++ {
		at := i * len(sample) / parts
		if at > 0 && at < len(sample) && (len(cuts) == 0 || sample[at-1] > cuts[len(cuts)-1]) {
			cuts = append(cuts, sample[at-1])
		}
	}
	return cuts
}

// ResumeBase opens a snapshot that reads collection's ids after after, in chunks, as
// the base read at at that an earlier read left there (snapshot.BaseResumer). It
// fails with snapshot.ErrCannotResume when the table's rows can no longer be told
// changed since at by row version (its files, definition or key changed, or it is
// another cluster), or its ids are not read in chunks. With the logical watch, the
// stream's key log since at went with the process that read it: the version that
// takes the base catches it up by row version.
func (s *Source) ResumeBase(ctx context.Context, collection string, at snapshot.Position, after string) (snapshot.SourceSnapshot, error) {
	i := slices.IndexFunc(s.collections, func(c Collection) bool { return c.Name == collection })
	if i < 0 {
		return nil, fmt.Errorf("%w: no collection %q", snapshot.ErrInvalid, collection)
	}
	cols := s.collections[i : i+1]
	began := time.Now()
	sn, err := s.start(ctx, nil, cols)
	if err != nil {
		return nil, err
	}
	b, err := s.resumed(ctx, sn, cols[0], at, began)
	if err != nil {
		_ = sn.Close(ctx)
		return nil, err
	}
	b.after = after
	return b, nil
}

// resumed checks that a base read at at can go on in sn, and returns sn as its
// chunked read.
func (s *Source) resumed(ctx context.Context, sn *snap, c Collection, at snapshot.Position, began time.Time) (*chunkedBase, error) {
	cannot := func(why string) error { return fmt.Errorf("%w: %s", snapshot.ErrCannotResume, why) }
	cr := sn.reads[c.Name]
	files, err := tableFiles(ctx, sn.tx, []Collection{c})
	if err != nil {
		return nil, fmt.Errorf("the files of the table: %w", err)
	}
	cols, err := tableDefinitions(ctx, sn.tx, c)
	if err != nil {
		return nil, fmt.Errorf("definitions: %w", err)
	}
	switch {
	case at.System != sn.pos.System:
		return nil, cannot("the source is another cluster than the one the base was read from")
	case at.Configs[c.Name] != sn.pos.Configs[c.Name]:
		return nil, cannot("the collection's config or key changed")
	case at.Definitions[c.Name] == "" || definitionsOf(cols) != at.Definitions[c.Name]:
		return nil, cannot("the table's definition changed")
	case at.Files[c.Name] == "" || files[c.Name] != at.Files[c.Name]:
		return nil, cannot("the table was rewritten (VACUUM FULL, CLUSTER, TRUNCATE or a type change): its row versions tell nothing since the base's position")
	}
	ranges, err := sn.keyRanges(ctx, cr)
	if err != nil {
		return nil, err
	}
	if len(ranges) == 0 {
		return nil, cannot("its ids are not read in chunks")
	}
	b, err := s.chunked(ctx, sn, c.Name, began)
	if err != nil {
		return nil, err
	}
	// The base's position is where it was read from; this snapshot's own is not
	// the base's.
	sn.pos = at
	b.ranges = ranges
	return b, nil
}
