package testenv

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy that delays everything it forwards, in both directions, by a
// delay that can be changed while it runs: a slow network or a slow Bigtable.
type Proxy struct {
	addr  string
	delay atomic.Int64 // nanoseconds
}

// Addr is the address to dial instead of the upstream.
func (p *Proxy) Addr() string { return p.addr }

// SetDelay sets how long each chunk of bytes is held before it is forwarded (0: none).
// It applies to bytes read from now on.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// LatencyProxy starts a Proxy to upstream (host:port); it stops when the test ends.
func LatencyProxy(tb testing.TB, upstream string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{addr: ln.Addr().String()}
	var mu sync.Mutex
	var conns []net.Conn
	tb.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				down.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, down, up)
			mu.Unlock()
			go p.pump(down, up)
			go p.pump(up, down)
		}
	}()
	return p
}

// pump copies src to dst, holding each chunk until the delay after it was read; the
// chunks stay in order and keep flowing while earlier ones wait.
func (p *Proxy) pump(src, dst net.Conn) {
	type chunk struct {
		b   []byte
		due time.Time
	}
	q := make(chan chunk, 4096)
	go func() {
		defer dst.Close()
		for c := range q {
			time.Sleep(time.Until(c.due))
			if _, err := dst.Write(c.b); err != nil {
				for range q {
				}
				return
			}
		}
	}()
	defer close(q)
	for {
		b := make([]byte, 32<<10)
		n, err := src.Read(b)
		if n > 0 {
			q <- chunk{b[:n], time.Now().Add(time.Duration(p.delay.Load()))}
		}
		if err != nil {
			return
		}
	}
}
