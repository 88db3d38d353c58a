package testenv

import (
	"context"
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
