package testenv

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"
)

// BusyCores keeps every core busy, with a spinning goroutine per core, from when
// start first reports true (polled every 50 ms) until ctx ends; the returned wait
// returns once the spinners have stopped. Freshness stress tests run half their
// probes beside it: CPU contention is where a commit's tail latency hides.
func BusyCores(ctx context.Context, start func() bool) (wait func()) {
	var spin sync.WaitGroup
	spin.Add(1)
	go func() {
		defer spin.Done()
		for !start() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		for range runtime.NumCPU() {
			spin.Add(1)
			go func() {
				defer spin.Done()
				for x := 0; ctx.Err() == nil; x++ {
					if x%1_000_000 == 0 {
						runtime.Gosched()
					}
				}
			}()
		}
	}()
	return spin.Wait
}

// Probers runs probers goroutines, each making its probes with run(ctx, p, served)
// and calling served with each probe's time to served; once half of total probes
// were served, every core is kept busy (BusyCores) until the last ends. It returns
// every probe's time and the first error, which cancels the other probers.
func Probers(probers, total int, run func(ctx context.Context, p int, served func(time.Duration)) error) ([]time.Duration, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var lat []time.Duration
	var first error
	halfway := func() bool { mu.Lock(); defer mu.Unlock(); return len(lat) >= total/2 }
	wait := BusyCores(ctx, halfway)
	defer func() { cancel(); wait() }()
	var wg sync.WaitGroup
	for p := range probers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := run(ctx, p, func(d time.Duration) { mu.Lock(); lat = append(lat, d); mu.Unlock() })
			if err == nil {
				return
			}
			mu.Lock()
			if first == nil && (ctx.Err() == nil || !errors.Is(err, context.Canceled)) {
				first = err
			}
			mu.Unlock()
			cancel()
		}()
	}
	wg.Wait()
	return lat, first
}
