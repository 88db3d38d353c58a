package pgsource

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
)

// A table dropped and created again between the watch finding its tables (by name)
// and reading their baseline digest (by oid) leaves a baseline that names the
// dropped table: the watch finds the set again until the two agree, so the new
// table's later definition changes are seen.
func TestWatchBaselineAgreesWithItsTables(t *testing.T) {
	dsn := testenv.Postgres(t)
	const recreate = `BEGIN; DROP TABLE items; CREATE TABLE items (id int PRIMARY KEY, v text); COMMIT`
	testenv.Exec(t, dsn, `CREATE TABLE items (id int PRIMARY KEY, v text)`)
	src, err := New(dsn, []Collection{{Name: "items", Table: "items"}})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		finds   int
		reasons []ChangeReason
	)
	w := &watch{src: src, mode: WatchModeLogical,
		cfg:     WatchConfig{Interval: 20 * time.Millisecond, Hot: time.Second, Resolve: time.Hour, Mode: WatchModeLogical},
		changed: func(c Change) { mu.Lock(); reasons = append(reasons, c.Reason); mu.Unlock() },
		polled:  func(WatchStats) {},
		found: func() {
			mu.Lock()
			finds++
			first := finds == 1
			mu.Unlock()
			if first {
				testenv.Exec(t, dsn, recreate)
			}
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.run(ctx) }()
	defer func() { cancel(); <-done }()
	count := func(r ChangeReason) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, got := range reasons {
			if got == r {
				n++
			}
		}
		return n
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if count(ReasonWatchStarted)+count(ReasonTablesChanged) == 0 {
			return errors.New("no baseline yet")
		}
		return nil
	})
	testenv.Exec(t, dsn, `ALTER TABLE items ADD COLUMN extra text`)
	testenv.Eventually(t, 10*time.Second, func() error {
		if count(ReasonDefinitions) == 0 {
			return errors.New("the column added to the table created again is unseen")
		}
		return nil
	})
}
