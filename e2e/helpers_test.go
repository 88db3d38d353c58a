package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// The test binary doubles as the helper processes of the multi-process tests: with
// SNAPFLIP_HELPER set it runs that helper instead of the tests.
func TestMain(m *testing.M) {
	switch os.Getenv("SNAPFLIP_HELPER") {
	case "":
		code := m.Run()
		reportOpenAPI(os.Stdout)
		os.Exit(code)
	case "lease-rounds":
		os.Exit(run(helperLeaseRounds))
	case "lease-hold":
		os.Exit(run(helperLeaseHold))
	default:
		fmt.Fprintln(os.Stderr, "unknown SNAPFLIP_HELPER")
		os.Exit(2)
	}
}

func run(f func(context.Context) error) int {
	if err := f(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}

func helperStore(ctx context.Context) (*store.Store, error) {
	return store.Open(ctx, testenv.StoreConfig(os.Getenv("HELPER_BIGTABLE")))
}

func envInt(k string) int {
	n, _ := strconv.Atoi(os.Getenv(k))
	return n
}

// helperLeaseRounds runs HELPER_GOROUTINES contenders, each acquiring and releasing the
// lease HELPER_ROUNDS times, and appends "enter" and "exit" lines around each hold to
// HELPER_LOG, a history shared by every process and written with O_APPEND.
func helperLeaseRounds(ctx context.Context) error {
	st, err := helperStore(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	f, err := os.OpenFile(os.Getenv("HELPER_LOG"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	var wg sync.WaitGroup
	errs := make(chan error, envInt("HELPER_GOROUTINES"))
	for g := range envInt("HELPER_GOROUTINES") {
		holder := fmt.Sprintf("p%d-g%d", os.Getpid(), g)
		l, err := st.NewLease("publish/ds", store.LeaseConfig{Holder: holder, Duration: 10 * time.Second, RetryMax: 50 * time.Millisecond})
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range envInt("HELPER_ROUNDS") {
				actx, cancel := context.WithTimeout(ctx, 3*time.Minute)
				h, err := l.Acquire(actx)
				cancel()
				if err != nil {
					errs <- err
					return
				}
				fmt.Fprintf(f, "enter %d %s\n", h.Fence(), holder)
				fmt.Fprintf(f, "exit %d %s\n", h.Fence(), holder)
				if err := h.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// helperLeaseHold takes the lease (raising the fence first, as the syncer does), says
// "held <token>", keeps it renewed, and for each "flip <version> <expected>" line on
// stdin flips the pointer with its token, answering "flip ok" or "flip <error>". It
// never looks at whether it still holds the lease: a paused process doesn't either.
func helperLeaseHold(ctx context.Context) error {
	st, err := helperStore(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	d, err := time.ParseDuration(os.Getenv("HELPER_LEASE"))
	if err != nil {
		return err
	}
	l, err := st.NewLease("publish/ds", store.LeaseConfig{Holder: fmt.Sprintf("holder-%d", os.Getpid()), Duration: d,
		BeforeAcquire: snapshot.RaiseFence(st, "ds")})
	if err != nil {
		return err
	}
	h, err := l.Acquire(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("held %d\n", h.Fence())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) != 3 || f[0] != "flip" {
			continue
		}
		_, err := st.FlipPointer(ctx, "ds", snapshot.Flip{Version: snapshot.Version(f[1]), Expected: snapshot.Version(f[2]),
			Fence: h.Fence(), At: time.Now()})
		if err != nil {
			fmt.Printf("flip %v\n", err)
		} else {
			fmt.Println("flip ok")
		}
	}
	return nil
}

func storeLeaseConfig(holder string) store.LeaseConfig {
	return store.LeaseConfig{Holder: holder, Duration: time.Minute}
}
