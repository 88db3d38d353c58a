package storetest

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/snapflip/snapflip/snapshot"
)

// Counting is a store that counts the reads reaching it: pointers, manifests, and
// fingerprint runs per layer. A test wraps the store under test in it where a read
// must happen once, or not at all.
type Counting struct {
	Contract
	pointers, manifests atomic.Int64

	mu   sync.Mutex
	runs map[snapshot.Version]int
}

// NewCounting returns st, counted.
func NewCounting(st Contract) *Counting {
	return &Counting{Contract: st, runs: map[snapshot.Version]int{}}
}

func (c *Counting) ReadPointer(ctx context.Context, dataset string) (snapshot.Pointer, error) {
	c.pointers.Add(1)
	return c.Contract.ReadPointer(ctx, dataset)
}

func (c *Counting) ReadManifest(ctx context.Context, dataset string, v snapshot.Version) (snapshot.Manifest, error) {
	c.manifests.Add(1)
	return c.Contract.ReadManifest(ctx, dataset, v)
}

func (c *Counting) ScanRun(ctx context.Context, dataset string, layer snapshot.Version, collection string, fn func([]byte) bool) error {
	c.countRun(layer)
	return c.Contract.ScanRun(ctx, dataset, layer, collection, fn)
}

func (c *Counting) ScanRunFrom(ctx context.Context, ref snapshot.RunRef, from int64, fn func(chunk []byte) bool) error {
	c.countRun(ref.Layer)
	return c.Contract.ScanRunFrom(ctx, ref, from, fn)
}

func (c *Counting) countRun(layer snapshot.Version) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.runs[layer]++
}

// Pointers returns the pointer reads so far.
func (c *Counting) Pointers() int64 { return c.pointers.Load() }

// Manifests returns the manifest reads so far.
func (c *Counting) Manifests() int64 { return c.manifests.Load() }

// Runs returns the run reads so far, per layer.
func (c *Counting) Runs() map[snapshot.Version]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.runs)
}

// RunsRead returns the run reads so far, of every layer.
func (c *Counting) RunsRead() int64 {
	var n int64
	for _, k := range c.Runs() {
		n += int64(k)
	}
	return n
}
