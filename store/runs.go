package store

import (
	"context"
	"fmt"
	"strconv"

	"cloud.google.com/go/bigtable"

	"github.com/snapflip/snapflip/snapshot"
)

// colRun is the column d:f holding one chunk of a fingerprint run (layer/fprun.go).
// Runs share family d with the documents, so they age out and are refreshed with them.
const colRun = "f"

// colLive is the column d:n, in the row of a run's chunk 0, recording how many live
// ids the chain the layer tops holds (Writer.WriteLive). ScanRun reads d:f alone.
const colLive = "n"

// RecordedLive returns how many live ids the chain the layer tops holds, as the
// publish that wrote the layer recorded (Writer.WriteLive); false when none did.
func (s *Store) RecordedLive(ctx context.Context, dataset string, layer snapshot.Version, collection string) (int64, bool, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	row, err := s.tbl.ReadRow(ctx, runKey(dataset, layer, collection, 0), bigtable.RowFilter(column(famDocs, colLive)))
	if err != nil {
		return 0, false, s.wrap(err, "read the live ids of %s at %s", collection, layer)
	}
	cells := row[famDocs]
	if len(cells) == 0 {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(string(cells[0].Value), 10, 64)
	if err != nil {
		return 0, false, nil // not a record this code wrote: none
	}
	return n, true, nil
}

// ScanRun calls fn with each chunk of a layer's fingerprint run for a collection, in
// order, until fn returns false. Like ScanDocuments it is bounded by its progress.
func (s *Store) ScanRun(ctx context.Context, dataset string, v snapshot.Version, collection string, fn func(chunk []byte) bool) error {
	return s.ScanRunFrom(ctx, snapshot.RunRef{Dataset: dataset, Layer: v, Collection: collection}, 0, fn)
}

// ScanRunFrom is ScanRun from the run's chunk from on (chunks are numbered from 0).
func (s *Store) ScanRunFrom(ctx context.Context, ref snapshot.RunRef, from int64, fn func(chunk []byte) bool) error {
	dataset, v, collection := ref.Dataset, ref.Layer, ref.Collection
	prefix := runPrefix(dataset, v, collection)
	what := fmt.Sprintf("read the fingerprints of %s at %s", collection, v)
	// The prefix ends in '#': the range ends before the next byte.
	rows := bigtable.NewRange(runKey(dataset, v, collection, from), prefix[:len(prefix)-1]+"$")
	g := s.guardStall(ctx)
	err := s.tbl.ReadRows(g.ctx, rows, func(r bigtable.Row) bool {
		g.pause()
		defer g.resume()
		if cells := r[famDocs]; len(cells) > 0 {
			return fn(cells[0].Value)
		}
		return true
	}, bigtable.RowFilter(column(famDocs, colRun)))
	if stalled := g.stop(); stalled != nil && err != nil {
		return s.wrap(stalled, "%s", what)
	}
	if err != nil {
		return s.wrap(err, "%s", what)
	}
	return nil
}
