package rig

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// KillingSource is a source whose bases read beside the stream (OpenBase,
// ResumeBase, ReadBasePart) count the rows they send, and at the row KillAt (counted from 1) call
// Kill, which stops the syncer reading them.
type KillingSource struct {
	snapshot.Source
	Rows   atomic.Int64
	KillAt int64
	Kill   func()
	// FirstPart, when set, holds the first part a shared base reads
	// (ReadBasePart) until it is closed, so that other replicas read theirs.
	FirstPart chan struct{}

	once sync.Once
}

// OpenBase opens the base's snapshot as the source does, its rows counted.
func (k *KillingSource) OpenBase(ctx context.Context, collection string) (snapshot.SourceSnapshot, error) {
	snap, err := k.Source.(snapshot.BaseOpener).OpenBase(ctx, collection)
	if err != nil {
		return nil, err
	}
	return &countedReads{DeltaSnapshot: snap.(snapshot.DeltaSnapshot), src: k}, nil
}

// ResumeBase resumes the base as the source does, its rows counted.
func (k *KillingSource) ResumeBase(ctx context.Context, collection string, at snapshot.Position, after string) (snapshot.SourceSnapshot, error) {
	snap, err := k.Source.(snapshot.BaseResumer).ResumeBase(ctx, collection, at, after)
	if err != nil {
		return nil, err
	}
	return &countedReads{DeltaSnapshot: snap.(snapshot.DeltaSnapshot), src: k}, nil
}

// ReadBasePart reads a part of a base as the source does, its rows counted.
func (k *KillingSource) ReadBasePart(ctx context.Context, collection string, at snapshot.Position, after, through string) (snapshot.SourceSnapshot, error) {
	if k.FirstPart != nil {
		k.once.Do(func() {
			select {
			case <-k.FirstPart:
			case <-ctx.Done():
			}
		})
	}
	snap, err := k.Source.(snapshot.BaseSharer).ReadBasePart(ctx, collection, at, after, through)
	if err != nil {
		return nil, err
	}
	return &countedReads{DeltaSnapshot: snap.(snapshot.DeltaSnapshot), src: k}, nil
}

// countedReads is a base's source snapshot whose rows KillingSource counts.
type countedReads struct {
	snapshot.DeltaSnapshot
	src *KillingSource
}

func (s *countedReads) ScanSince(ctx context.Context, collection string, since *snapshot.Position, fn func(snapshot.Document) error) (snapshot.LayerMode, error) {
	return s.DeltaSnapshot.ScanSince(ctx, collection, since, func(d snapshot.Document) error {
		if s.src.Rows.Add(1) == s.src.KillAt && s.src.Kill != nil {
			s.src.Kill()
		}
		return fn(d)
	})
}

func (s *countedReads) OnChunk(fn func(ctx context.Context, last string) error) {
	if cs, ok := s.DeltaSnapshot.(snapshot.ChunkedSnapshot); ok {
		cs.OnChunk(fn)
	}
}

// BaseParts passes on the source's cuts of a base into parts.
func (s *countedReads) BaseParts(ctx context.Context, collection string, rows int64) ([]string, snapshot.LayerMode, error) {
	if ps, ok := s.DeltaSnapshot.(snapshot.PartedSnapshot); ok {
		return ps.BaseParts(ctx, collection, rows)
	}
	return nil, snapshot.LayerMode{}, nil
}

func (s *countedReads) Indexes(ctx context.Context, collection string) ([]snapshot.IndexDef, error) {
	if ix, ok := s.DeltaSnapshot.(snapshot.IndexedSnapshot); ok {
		return ix.Indexes(ctx, collection)
	}
	return nil, nil
}

// StartCompactor starts a Compactor of the rig's dataset that reads the bases of
// held and new collections from src, unpaced, keeping its records in the rig's
// store, and makes it the writer's and the publisher's; cancel stops it, as a
// killed syncer stops.
func (r *Rig) StartCompactor(src snapshot.Source) (c *layer.Compactor, cancel context.CancelFunc) {
	c = &layer.Compactor{Dataset: Dataset, Writer: r.Writer, Docs: r.Store, Versions: r.Pub.Versions, RowsPerSecond: -1,
		Source: src, Records: r.Store, Syncer: "syncer-1"}
	ctx, cancel := context.WithCancel(context.Background())
	c.Start(ctx)
	r.Writer.Compactor, r.Pub.Bases = c, c
	return c, cancel
}

// KillableCells are lease cells that fail every call once Killed is set: the
// cells of a replica that was killed, whose claims stop renewing and lapse.
type KillableCells struct {
	store.LeaseCell
	Killed atomic.Bool
}

// ErrKilled is what KillableCells return once killed.
var ErrKilled = errors.New("the replica was killed")

func (k *KillableCells) ReadLease(ctx context.Context, name string) ([]byte, error) {
	if k.Killed.Load() {
		return nil, ErrKilled
	}
	return k.LeaseCell.ReadLease(ctx, name)
}

func (k *KillableCells) SwapLease(ctx context.Context, name string, prev, next []byte) (bool, error) {
	if k.Killed.Load() {
		return false, ErrKilled
	}
	return k.LeaseCell.SwapLease(ctx, name, prev, next)
}
