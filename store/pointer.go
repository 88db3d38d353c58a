package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/snapflip/snapflip/snapshot"
)

// The pointer row p#<dataset> holds, in family c, the whole pointer as JSON and, beside
// it, the cells that Bigtable's conditional write compares: the version, the fence and
// the source LSN as 8-byte big-endian numbers (so byte order is numeric order), and the
// pinned flag. All of them change together in one CheckAndMutateRow.
const (
	colPointer = "pointer"
	colVersion = "version"
	colFence   = "fence"
	colSource  = "source"
	colPinned  = "pinned"
	// colCovered holds a snapshot.Coverage as JSON and colCoveredLSN its LSN, which
	// RecordCoverage's condition compares; both are written by every flip too.
	colCovered    = "covered"
	colCoveredLSN = "coveredlsn"
	// colDemand is the read-your-writes demand counter, an 8-byte big-endian number
	// that ReadModifyWriteRow increments.
	colDemand = "demand"
)

func be64(n uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	return b[:]
}

// column returns a filter for the newest cell of one column.
func column(fam, col string) bigtable.Filter {
	return bigtable.ChainFilters(bigtable.ColumnRangeFilter(fam, col, col+"\x00"), bigtable.LatestNFilter(1))
}

// valueAtLeast matches the column's value when it is >= v (bytewise).
func valueAtLeast(fam, col string, v []byte) bigtable.Filter {
	return bigtable.ChainFilters(column(fam, col), bigtable.ValueRangeFilter(v, nil))
}

// valueEquals matches the column's value when it is exactly v.
func valueEquals(fam, col string, v []byte) bigtable.Filter {
	return bigtable.ChainFilters(column(fam, col), bigtable.ValueRangeFilter(v, append(append([]byte{}, v...), 0)))
}

// valueNotEquals matches the column's value when it exists and is not v.
func valueNotEquals(fam, col string, v []byte) bigtable.Filter {
	return bigtable.ChainFilters(column(fam, col), bigtable.InterleaveFilters(
		bigtable.ValueRangeFilter([]byte{}, v),
		bigtable.ValueRangeFilter(append(append([]byte{}, v...), 0), nil),
	))
}

// ReadPointer returns the dataset's pointer, or ErrNoVersion.
func (s *Store) ReadPointer(ctx context.Context, dataset string) (snapshot.Pointer, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	row, err := s.tbl.ReadRow(ctx, pointerKey(dataset), pointerFilter())
	if status.Code(err) == codes.NotFound {
		// No table yet: the syncer creates it on its first run.
		return snapshot.Pointer{}, fmt.Errorf("dataset %s: table %s not found: %w", dataset, s.cfg.Table, snapshot.ErrNoVersion)
	}
	if err != nil {
		return snapshot.Pointer{}, s.wrap(err, "read pointer of dataset %s", dataset)
	}
	return decodePointer(dataset, row)
}

// pointerFilter reads what decodePointer needs of a pointer row.
func pointerFilter() bigtable.ReadOption {
	return bigtable.RowFilter(bigtable.InterleaveFilters(column(famControl, colPointer), column(famControl, colFence),
		column(famControl, colCovered), column(famControl, colDemand)))
}

// decodePointer returns the pointer a row holds, or ErrNoVersion when it holds none
// (a fence advanced before the first flip).
func decodePointer(dataset string, row bigtable.Row) (snapshot.Pointer, error) {
	var p snapshot.Pointer
	var body, fence, covered, demand []byte
	for _, c := range row[famControl] {
		switch c.Column {
		case famControl + ":" + colPointer:
			body = c.Value
		case famControl + ":" + colFence:
			fence = c.Value
		case famControl + ":" + colCovered:
			covered = c.Value
		case famControl + ":" + colDemand:
			demand = c.Value
		}
	}
	if body == nil {
		return snapshot.Pointer{}, fmt.Errorf("dataset %s: %w", dataset, snapshot.ErrNoVersion)
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return snapshot.Pointer{}, fmt.Errorf("decode pointer of dataset %s: %w", dataset, err)
	}
	// The fence cell is authoritative: AdvanceFence moves it without a flip.
	if len(fence) == 8 {
		p.Fence = binary.BigEndian.Uint64(fence)
	}
	if covered != nil {
		if err := json.Unmarshal(covered, &p.Covered); err != nil {
			return snapshot.Pointer{}, fmt.Errorf("decode coverage of dataset %s: %w", dataset, err)
		}
	}
	if len(demand) == 8 {
		p.Demand = binary.BigEndian.Uint64(demand)
	}
	return p, nil
}

// encodePointer returns the cells of p: the pointer's JSON and its coverage's.
func encodePointer(p snapshot.Pointer) (body, covered []byte, err error) {
	if body, err = json.Marshal(p); err != nil {
		return nil, nil, err
	}
	if covered, err = json.Marshal(p.Covered); err != nil {
		return nil, nil, err
	}
	return body, covered, nil
}

// ListPointers returns the pointer of every dataset that has published a version in
// the table, by dataset; none when the table does not exist.
func (s *Store) ListPointers(ctx context.Context) (map[string]snapshot.Pointer, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	out := map[string]snapshot.Pointer{}
	var derr error
	err := s.tbl.ReadRows(ctx, bigtable.PrefixRange(pointerPrefix), func(r bigtable.Row) bool {
		dataset, err := unescapeComponent(strings.TrimPrefix(r.Key(), pointerPrefix))
		if err != nil {
			derr = err
			return false
		}
		p, err := decodePointer(dataset, r)
		switch {
		case errors.Is(err, snapshot.ErrNoVersion):
		case err != nil:
			derr = err
			return false
		default:
			out[dataset] = p
		}
		return true
	}, pointerFilter())
	if status.Code(err) == codes.NotFound {
		return out, nil // no table yet: nothing was ever published
	}
	if err != nil {
		return nil, s.wrap(err, "list pointers")
	}
	return out, derr
}

// FlipPointer moves the pointer in one CheckAndMutateRow. The predicate matches, and
// so rejects the flip, when the stored fence is greater than the token, when the dataset is
// pinned (unless rolling back), when the stored source LSN is greater than the new one
// (unless rolling back), or when the stored version is not the expected one.
func (s *Store) FlipPointer(ctx context.Context, dataset string, f snapshot.Flip) (snapshot.Pointer, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	if f.Fence == 0 {
		return snapshot.Pointer{}, fmt.Errorf("%w flip: fencing token 0", snapshot.ErrInvalid)
	}
	p := f.Pointer()
	body, covered, err := encodePointer(p)
	if err != nil {
		return snapshot.Pointer{}, err
	}
	reject := []bigtable.Filter{valueAtLeast(famControl, colFence, be64(f.Fence+1))}
	if !f.Rollback {
		reject = append(reject, valueEquals(famControl, colPinned, []byte("1")))
		if f.Source.LSN < ^uint64(0) {
			reject = append(reject, valueAtLeast(famControl, colSource, be64(f.Source.LSN+1)))
		}
	}
	if f.Expected == "" {
		reject = append(reject, column(famControl, colVersion))
	} else {
		reject = append(reject, valueNotEquals(famControl, colVersion, []byte(f.Expected)))
	}
	pinned := []byte("0")
	if f.Pin {
		pinned = []byte("1")
	}
	ts := bigtable.Time(f.At)
	mut := bigtable.NewMutation()
	for col, val := range map[string][]byte{
		colPointer:    body,
		colVersion:    []byte(f.Version),
		colFence:      be64(f.Fence),
		colSource:     be64(f.Source.LSN),
		colPinned:     pinned,
		colCovered:    covered,
		colCoveredLSN: be64(f.Source.LSN),
	} {
		mut.DeleteCellsInColumn(famControl, col)
		mut.Set(famControl, col, ts, val)
	}
	var rejected bool
	cond := bigtable.NewCondMutation(bigtable.InterleaveFilters(reject...), nil, mut)
	err = s.tbl.Apply(ctx, pointerKey(dataset), cond, bigtable.GetCondMutationResult(&rejected))
	if err != nil {
		// The write may or may not have applied: re-read. Showing this flip proves it
		// applied. Anything else proves nothing (it may have applied and been flipped
		// over since, or the re-read failed): the outcome is unknown.
		rctx, cancelRead := s.reread(ctx)
		got, rerr := s.ReadPointer(rctx, dataset)
		cancelRead()
		if rerr == nil && got.Version == f.Version && got.Fence == f.Fence {
			return got, nil
		}
		if rerr != nil {
			err = fmt.Errorf("%w (and the re-read failed: %v)", err, rerr)
		}
		return snapshot.Pointer{}, fmt.Errorf("%w: %w", snapshot.ErrOutcomeUnknown,
			s.wrap(err, "flip pointer of dataset %s to %s", dataset, f.Version))
	}
	if !rejected {
		return p, nil
	}
	return snapshot.Pointer{}, s.whyRejected(ctx, dataset, f)
}

// whyRejected re-reads the pointer after a rejected flip and names the reason.
func (s *Store) whyRejected(ctx context.Context, dataset string, f snapshot.Flip) error {
	cur, err := s.ReadPointer(ctx, dataset)
	if errors.Is(err, snapshot.ErrNoVersion) {
		// No flip yet, but a fence may have been advanced (a new lease holder's).
		cur.Fence, err = s.readFence(ctx, dataset)
	}
	if err != nil {
		return fmt.Errorf("flip of dataset %s rejected; re-read failed: %w", dataset, err)
	}
	return snapshot.WhyRefused(dataset, f, cur)
}

// readFence returns the dataset's fence, 0 when none is stored.
func (s *Store) readFence(ctx context.Context, dataset string) (uint64, error) {
	return s.readCounter(ctx, dataset, colFence, "the fence")
}

// RecordCoverage records, without moving the pointer, that its version still holds
// everything c.Snapshot saw. The condition rejects it, like a flip, when the stored
// fence is greater than token, when the dataset is pinned, when the pointer names
// another version than c.Version, or when a coverage read at a later LSN is recorded.
// Applying it twice is harmless, so a lost reply needs no re-read: the caller's next
// sync records again.
func (s *Store) RecordCoverage(ctx context.Context, dataset string, token uint64, c snapshot.Coverage) error {
	ctx, cancel := s.op(ctx)
	defer cancel()
	if c.Version == "" {
		return fmt.Errorf("%w coverage: no version", snapshot.ErrInvalid)
	}
	body, err := json.Marshal(c)
	if err != nil {
		return err
	}
	reject := []bigtable.Filter{
		valueAtLeast(famControl, colFence, be64(token+1)),
		valueEquals(famControl, colPinned, []byte("1")),
		valueNotEquals(famControl, colVersion, []byte(c.Version)),
	}
	if c.LSN < ^uint64(0) {
		reject = append(reject, valueAtLeast(famControl, colCoveredLSN, be64(c.LSN+1)))
	}
	ts := bigtable.Time(c.At)
	mut := bigtable.NewMutation()
	for col, val := range map[string][]byte{colCovered: body, colCoveredLSN: be64(c.LSN)} {
		mut.DeleteCellsInColumn(famControl, col)
		mut.Set(famControl, col, ts, val)
	}
	var rejected bool
	cond := bigtable.NewCondMutation(bigtable.InterleaveFilters(reject...), nil, mut)
	if err := s.tbl.Apply(ctx, pointerKey(dataset), cond, bigtable.GetCondMutationResult(&rejected)); err != nil {
		return s.wrap(err, "record coverage of dataset %s at %s", dataset, c.Version)
	}
	if !rejected {
		return nil
	}
	cur, err := s.ReadPointer(ctx, dataset)
	if errors.Is(err, snapshot.ErrNoVersion) {
		// No flip yet, but a fence may have been advanced (a new lease holder's).
		cur.Fence, err = s.readFence(ctx, dataset)
	}
	if err != nil {
		return fmt.Errorf("coverage of dataset %s rejected; re-read failed: %w", dataset, err)
	}
	return snapshot.WhyCoverageRefused(dataset, token, c, cur)
}

// RaiseDemand adds one to the dataset's demand counter (ReadModifyWriteRow, so that
// raises from every API replica count) and returns its new value.
func (s *Store) RaiseDemand(ctx context.Context, dataset string) (uint64, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	rmw := bigtable.NewReadModifyWrite()
	rmw.Increment(famControl, colDemand, 1)
	row, err := s.tbl.ApplyReadModifyWrite(ctx, pointerKey(dataset), rmw)
	if err != nil {
		return 0, s.wrap(err, "raise demand of dataset %s", dataset)
	}
	for _, c := range row[famControl] {
		if c.Column == famControl+":"+colDemand && len(c.Value) == 8 {
			return binary.BigEndian.Uint64(c.Value), nil
		}
	}
	return 0, fmt.Errorf("raise demand of dataset %s: the counter was not returned", dataset)
}

// ReadDemand returns the dataset's demand counter, 0 when it was never raised (or
// the table does not exist yet).
func (s *Store) ReadDemand(ctx context.Context, dataset string) (uint64, error) {
	return s.readCounter(ctx, dataset, colDemand, "demand")
}

// readCounter returns the 8-byte counter in the dataset's pointer row at col, 0 when
// none is stored or the table does not exist yet.
func (s *Store) readCounter(ctx context.Context, dataset, col, what string) (uint64, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	row, err := s.tbl.ReadRow(ctx, pointerKey(dataset), bigtable.RowFilter(column(famControl, col)))
	if status.Code(err) == codes.NotFound {
		return 0, nil
	}
	if err != nil {
		return 0, s.wrap(err, "read %s of dataset %s", what, dataset)
	}
	for _, c := range row[famControl] {
		if len(c.Value) == 8 {
			return binary.BigEndian.Uint64(c.Value), nil
		}
	}
	return 0, nil
}

// AdvanceFence raises the pointer's fence to token, without moving the pointer, so that
// every holder of an older token is refused from now on. It never lowers the fence,
// and applying it twice is harmless, so a lost reply needs no re-read.
func (s *Store) AdvanceFence(ctx context.Context, dataset string, token uint64) error {
	ctx, cancel := s.op(ctx)
	defer cancel()
	mut := bigtable.NewMutation()
	mut.DeleteCellsInColumn(famControl, colFence)
	mut.Set(famControl, colFence, bigtable.Now(), be64(token))
	cond := bigtable.NewCondMutation(valueAtLeast(famControl, colFence, be64(token)), nil, mut)
	if err := s.tbl.Apply(ctx, pointerKey(dataset), cond); err != nil {
		return s.wrap(err, "advance fence of dataset %s to %d", dataset, token)
	}
	return nil
}
