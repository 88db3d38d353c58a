package resolver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/snapflip/snapflip/snapshot"
)

// pointerCache keeps the last pointer read and decides, for each request, whether it
// may be served (invariant 8, bounded staleness):
//
//   - a pointer read less than one refresh interval ago is served;
//   - while a refresh is in flight, the pointer it replaces is served as long as it was
//     read less than one refresh interval plus one timeout ago (the refresh itself is
//     bounded by the timeout), so a slow Bigtable never makes requests queue;
//   - when the last read failed, Bigtable is failing: the last good pointer is served up
//     to max-stale, then the error, at once, without waiting for a doomed read; a new
//     read is started at most once per refresh interval to notice recovery;
//   - otherwise (an idle replica whose pointer aged, or the first request) the request
//     waits for one read, which every concurrent request shares.
//
// Times are when a read was sent, so an age is never understated. Reads are one at a
// time and their results land in order, so a replica never goes back to an older
// pointer except when the pointer itself went back (a rollback).
type pointerCache struct {
	read                       func(ctx context.Context) (snapshot.Pointer, error)
	refresh, timeout, maxStale time.Duration
	now                        func() time.Time

	mu        sync.Mutex
	base      context.Context // reads end when it ends (Run's context); default Background
	ptr       snapshot.Pointer
	none      bool          // the last good read found nothing published
	fetchedAt time.Time     // when the last good read was sent; zero before one
	err       error         // the last read's error; nil when it succeeded
	triedAt   time.Time     // when the last read was sent; zero before one
	flight    chan struct{} // closed when the read in flight ends; nil when none is
	landed    chan struct{} // closed when the next read ends, whoever started it
}

// landing returns a channel closed when the next pointer read ends.
func (c *pointerCache) landing() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.landed == nil {
		c.landed = make(chan struct{})
	}
	return c.landed
}

// context is the context reads run under: Run's, else Background.
func (c *pointerCache) context() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.base == nil {
		return context.Background()
	}
	return c.base
}

// get returns the pointer a request may resolve through, by the rules above.
func (c *pointerCache) get(ctx context.Context) (snapshot.Pointer, error) {
	c.mu.Lock()
	now := c.now()
	switch {
	case c.good() && now.Sub(c.fetchedAt) < c.refresh:
		defer c.mu.Unlock()
		return c.answer()
	case c.err != nil:
		if c.flight == nil && now.Sub(c.triedAt) >= c.refresh {
			c.start()
		}
		defer c.mu.Unlock()
		return c.stale(now)
	case c.flight != nil && c.good() && now.Sub(c.fetchedAt) < c.refresh+c.timeout:
		defer c.mu.Unlock()
		return c.answer()
	}
	if err := c.awaitRead(ctx); err != nil {
		return snapshot.Pointer{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		return c.answer()
	}
	// The read failed, so Bigtable is failing: the last good pointer may be served if
	// it was within max-stale when the request came, however long the read took to
	// fail.
	return c.stale(now)
}

// since returns a pointer read sent at or after t, waiting for one (at most a read in
// flight and one more) when the last was sent before; the error of such a read that
// failed.
func (c *pointerCache) since(ctx context.Context, t time.Time) (snapshot.Pointer, error) {
	for {
		c.mu.Lock()
		switch {
		case c.err == nil && c.good() && !c.fetchedAt.Before(t):
			defer c.mu.Unlock()
			return c.answer()
		case c.err != nil && !c.triedAt.Before(t):
			defer c.mu.Unlock()
			return snapshot.Pointer{}, fmt.Errorf("read pointer: %w", c.err)
		}
		if err := c.awaitRead(ctx); err != nil {
			return snapshot.Pointer{}, err
		}
	}
}

// awaitRead starts a read unless one is in flight, lets go of mu (which callers
// hold), and waits until the read lands or ctx ends.
func (c *pointerCache) awaitRead(ctx context.Context) error {
	ch := c.start()
	c.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// good reports whether a read ever succeeded. Callers hold mu.
func (c *pointerCache) good() bool { return !c.fetchedAt.IsZero() }

// answer is the last good read as a result. Callers hold mu.
func (c *pointerCache) answer() (snapshot.Pointer, error) {
	if c.none {
		return snapshot.Pointer{}, snapshot.ErrNoVersion
	}
	return c.ptr, nil
}

// stale answers while reads fail: the last good pointer up to max-stale, then the
// error. Callers hold mu.
func (c *pointerCache) stale(now time.Time) (snapshot.Pointer, error) {
	if c.good() && now.Sub(c.fetchedAt) < c.maxStale {
		return c.answer()
	}
	return snapshot.Pointer{}, fmt.Errorf("read pointer: %w", c.err)
}

// start begins a read unless one is in flight, and returns the channel closed when the
// read in flight ends. Callers hold mu.
func (c *pointerCache) start() chan struct{} {
	if c.flight != nil {
		return c.flight
	}
	ch := make(chan struct{})
	c.flight = ch
	sent := c.now()
	base := c.base
	if base == nil {
		base = context.Background()
	}
	go func() {
		ctx, cancel := context.WithTimeout(base, c.timeout)
		p, err := c.read(ctx)
		cancel()
		c.mu.Lock()
		defer c.mu.Unlock()
		c.triedAt = sent
		switch {
		case err == nil, errors.Is(err, snapshot.ErrNoVersion):
			c.ptr, c.none, c.fetchedAt, c.err = p, err != nil, sent, nil
		default:
			c.err = err
		}
		c.flight = nil
		close(ch)
		if c.landed != nil {
			close(c.landed)
			c.landed = nil
		}
	}()
	return ch
}

// run reads the pointer once per refresh interval until ctx ends, so that even a
// replica that serves no request keeps a pointer younger than the interval, and the
// first request after a quiet spell neither waits nor gets an old version.
func (c *pointerCache) run(ctx context.Context) {
	c.mu.Lock()
	c.base = ctx
	c.mu.Unlock()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		c.mu.Lock()
		var ch chan struct{}
		if c.flight != nil || c.triedAt.IsZero() || c.now().Sub(c.triedAt) >= c.refresh {
			ch = c.start()
		}
		c.mu.Unlock()
		if ch != nil {
			select {
			case <-ctx.Done():
				return
			case <-ch:
			}
		}
		c.mu.Lock()
		next := c.refresh - c.now().Sub(c.triedAt)
		c.mu.Unlock()
		timer.Reset(max(next, time.Millisecond))
	}
}

// age returns how long ago the last good read was sent, or -1 before one.
func (c *pointerCache) age() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.good() {
		return -1
	}
	return c.now().Sub(c.fetchedAt)
}
