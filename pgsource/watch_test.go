package pgsource_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
)

// changeLog collects a watch's notifications.
type changeLog struct {
	mu      sync.Mutex
	changes []pgsource.Change
	polls   int64
}

func (l *changeLog) add(c pgsource.Change) {
	l.mu.Lock()
	l.changes = append(l.changes, c)
	l.mu.Unlock()
}
func (l *changeLog) polled(s pgsource.WatchStats) {
	l.mu.Lock()
	l.polls = s.Polls
	l.mu.Unlock()
}

// take returns and forgets the changes so far.
func (l *changeLog) take() []pgsource.Change {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.changes
	l.changes = nil
	return c
}

func (l *changeLog) pollCount() int64 { l.mu.Lock(); defer l.mu.Unlock(); return l.polls }

// awaitPolls waits until n more polls have run, so whatever they would see is seen.
func (l *changeLog) awaitPolls(t *testing.T, n int64) {
	t.Helper()
	want := l.pollCount() + n
	testenv.Eventually(t, 10*time.Second, func() error {
		if got := l.pollCount(); got < want {
			return fmt.Errorf("the watch stopped polling: %d polls; want %d", got, want)
		}
		return nil
	})
}

// watching runs src's Watch with cfg until the test ends, and returns what it reports.
func watching(t *testing.T, src *pgsource.Source, cfg pgsource.WatchConfig) *changeLog {
	t.Helper()
	var l changeLog
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Watch(ctx, cfg, l.add, l.polled) }()
	t.Cleanup(func() { cancel(); <-done })
	return &l
}

// The watch sees a commit to any table a collection reads (a table, a view's base
// table, a query's joined table), and nothing while only other tables are written,
// except while hot just after a change.
func TestWatchSeesCommitsToWatchedTablesOnly(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn,
		`CREATE TABLE nums (id int PRIMARY KEY, v text)`, `INSERT INTO nums SELECT g, repeat('x', g * 7919 % 300) FROM generate_series(1, 20000) g`,
		`CREATE TABLE tags (id int, tag text)`, `CREATE TABLE other (id int)`,
		`CREATE TABLE parts (id int, r text) PARTITION BY LIST (r)`, `CREATE TABLE parts_a PARTITION OF parts FOR VALUES IN ('a')`,
		`CREATE VIEW odd AS SELECT * FROM nums WHERE id % 2 = 1`)
	// The setup's statistics reach the counters first, so that the watch does not take
	// them, arriving late on a busy server, for a change.
	conn := testenv.Connect(t, context.Background(), dsn)
	defer conn.Close(context.Background())
	testenv.Eventually(t, 30*time.Second, func() error {
		var n int64
		if err := conn.QueryRow(context.Background(), `SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables WHERE relname = 'nums'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 20000 {
			return fmt.Errorf("the setup's statistics have not arrived: %d inserts counted; want 20000", n)
		}
		return nil
	})
	src, err := pgsource.New(dsn, []pgsource.Collection{
		{Name: "odd", Table: "odd", Key: "id"},
		{Name: "tagged", Query: "SELECT n.id, t.tag FROM nums n JOIN tags t USING (id)", Key: "id"},
		{Name: "parts", Table: "parts", Key: "id"},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The watch's clock moves on when the test says: a change keeps it hot for an
	// hour, however slow the server, and cool() ends that at once.
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	l := watching(t, src, pgsource.WatchConfig{Interval: 20 * time.Millisecond, Hot: time.Hour, Now: now})
	// A poll that read the clock before cool() may report after it: two more polls
	// see that report land, and take() drops it.
	cool := func() { skew.Add(int64(2 * time.Hour)); l.awaitPolls(t, 2) }
	ctx := context.Background()
	l.awaitPolls(t, 3)
	if got := l.take(); len(got) != 1 || got[0].Reason.String() != "watch started" {
		t.Errorf("the first poll reported %+v; want one change, \"watch started\"", got)
	}

	expect := func(what string, want bool, stmts ...string) {
		t.Helper()
		testenv.Exec(t, dsn, stmts...) // each on its own session, whose exit reports its statistics
		l.awaitPolls(t, 5)
		if want { // a loaded server reports a session's statistics late
			testenv.Eventually(t, 10*time.Second, func() error {
				l.mu.Lock()
				defer l.mu.Unlock()
				if len(l.changes) == 0 {
					return fmt.Errorf("%s: no change seen", what)
				}
				return nil
			})
		}
		got := l.take()
		if want && len(got) == 0 {
			t.Errorf("%s: no change seen", what)
		}
		if !want && len(got) > 0 {
			t.Errorf("%s: %d changes seen (%+v); want none", what, len(got), got[0])
		}
		for _, c := range got {
			if c.LSN == 0 || c.Reason == 0 {
				t.Errorf("%s: change %+v has no LSN or reason", what, c)
			}
		}
	}
	expect("writes to an unwatched table", false, `INSERT INTO other VALUES (1)`, `INSERT INTO other VALUES (2)`)
	expect("an update of the view's base table", true, `UPDATE nums SET v = 'y' WHERE id = 2`)
	cool()
	l.take()
	expect("a query's joined table", true, `INSERT INTO tags VALUES (3, 't')`)
	expect("an unwatched table while hot", true, `INSERT INTO other VALUES (3)`)
	cool()
	l.take()
	expect("an unwatched table once cool again", false, `INSERT INTO other VALUES (4)`)
	expect("a partition of a watched table", true, `INSERT INTO parts VALUES (1, 'a')`)
	cool()
	l.take()
	expect("a truncate", true, `TRUNCATE tags`)
	cool()
	l.take()
	// ANALYZE (and autovacuum) rewrite the live-row estimate, not the rows: no change.
	// With a 300-row sample of 20,000 rows of varied width the estimate moves.
	live := func() (n int64) {
		t.Helper()
		conn := testenv.Connect(t, ctx, dsn)
		defer conn.Close(ctx)
		if err := conn.QueryRow(ctx, `SELECT pg_stat_get_live_tuples('nums'::regclass)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before, after := live(), int64(0)
	for range 10 { // each ANALYZE samples anew
		expect("an ANALYZE of a watched table", false, `SET default_statistics_target = 1; ANALYZE nums`)
		if after = live(); after != before {
			break
		}
	}
	if after == before {
		t.Errorf("ten ANALYZEs left the live-row estimate at %d: the case above tested nothing", after)
	}
}

// Watch refuses an unknown mode with snapshot.ErrInvalid at once, before connecting,
// and reports nothing.
func TestWatchRefusesUnknownModes(t *testing.T) {
	src, err := pgsource.New("postgres://nobody@127.0.0.1:1/none", []pgsource.Collection{{Name: "nums", Table: "nums"}})
	if err != nil {
		t.Fatal(err)
	}
	var l changeLog
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err = src.Watch(ctx, pgsource.WatchConfig{Mode: 7}, l.add, l.polled)
	cancel()
	if want := "WatchConfig.Mode 7: want WatchModeStats or WatchModeLogical"; !errors.Is(err, snapshot.ErrInvalid) || !strings.Contains(fmt.Sprint(err), want) {
		t.Errorf("Watch in mode 7 = %v; want snapshot.ErrInvalid saying %q", err, want)
	}
	if got := l.take(); len(got) > 0 || l.pollCount() > 0 {
		t.Errorf("Watch in mode 7 reported %+v after %d polls; want nothing", got, l.pollCount())
	}
}

// In both modes the watch reports a change, "definitions", for every committed
// statement that changes what a watched collection's rows say as JSON without a row
// change: columns added, dropped, renamed or retyped, a table rewritten in place, an
// enum label renamed or added (also through a domain), a composite type's attribute
// added, a view redefined (one a collection reads directly, and one a query reads), a
// materialized view refreshed, a composite type that only a query's result uses
// (ROW(…)::t), a table moved to a new file by VACUUM FULL (the sync that follows finds
// its row versions unchanged: TestScanSinceRendersOnlyRowsWrittenSince). DDL on
// other relations reports nothing.
func TestWatchSeesDefinitionChanges(t *testing.T) {
	for _, mode := range []pgsource.WatchMode{pgsource.WatchModeStats, pgsource.WatchModeLogical} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			dsn := testenv.Postgres(t)
			testenv.Exec(t, dsn,
				`CREATE TYPE mood AS ENUM ('sad', 'ok')`, `CREATE DOMAIN mood_d AS mood`, `CREATE TYPE addr AS (street text)`,
				`CREATE TYPE pt AS (x int, y int)`,
				`CREATE TABLE items (id int PRIMARY KEY, name text, n int, note text, m mood_d, a addr)`,
				`INSERT INTO items SELECT g, 'n' || g, g, 'x', 'ok', ROW('s')::addr FROM generate_series(1, 50) g`,
				`CREATE VIEW v AS SELECT id, note FROM items`, `CREATE VIEW v2 AS SELECT id, upper(note) AS note FROM items`,
				`CREATE MATERIALIZED VIEW mv AS SELECT id, n FROM items`,
				`CREATE TABLE other (id int)`)
			src, err := pgsource.New(dsn, []pgsource.Collection{
				{Name: "items", Table: "items", Key: "id"},
				{Name: "v", Table: "v", Key: "id"},
				{Name: "q", Query: "SELECT * FROM v2", Key: "id"},
				{Name: "mq", Query: "SELECT * FROM mv", Key: "id"},
				{Name: "pq", Query: "SELECT id, ROW(id, id)::pt AS p FROM items", Key: "id"},
			})
			if err != nil {
				t.Fatal(err)
			}
			l := watching(t, src, pgsource.WatchConfig{Interval: 20 * time.Millisecond, Mode: mode})
			l.awaitPolls(t, 3)
			l.take() // "watch started"
			for _, tc := range []struct {
				what string
				stmt string
				want bool
			}{
				{"DDL on another table", `ALTER TABLE other ADD COLUMN x int`, false},
				{"a new table", `CREATE TABLE unrelated (id int)`, false},
				{"a column added", `ALTER TABLE items ADD COLUMN extra text NOT NULL DEFAULT 'x'`, true},
				{"a column dropped", `ALTER TABLE items DROP COLUMN name`, true},
				{"a column renamed", `ALTER TABLE items RENAME COLUMN n TO qty`, true},
				{"a column retyped", `ALTER TABLE items ALTER COLUMN extra TYPE varchar(20)`, true},
				{"a rewrite keeping the type", `ALTER TABLE items ALTER COLUMN extra TYPE varchar(20) USING extra || 'y'`, true},
				{"an enum label renamed under a domain", `ALTER TYPE mood RENAME VALUE 'ok' TO 'fine'`, true},
				{"an enum label added", `ALTER TYPE mood ADD VALUE 'glad'`, true},
				{"a composite's attribute added", `ALTER TYPE addr ADD ATTRIBUTE zip text`, true},
				{"a view a collection reads redefined", `CREATE OR REPLACE VIEW v AS SELECT id, note || '!' AS note FROM items`, true},
				{"a view a query reads redefined", `CREATE OR REPLACE VIEW v2 AS SELECT id, lower(note) AS note FROM items`, true},
				{"a materialized view refreshed", `REFRESH MATERIALIZED VIEW mv`, true},
				{"a type only a query's result uses", `ALTER TYPE pt RENAME ATTRIBUTE x TO x2`, true},
				{"a table rewritten in place by VACUUM FULL", `VACUUM FULL items`, true},
			} {
				testenv.Exec(t, dsn, tc.stmt)
				l.awaitPolls(t, 5)
				var got []pgsource.Change
				for _, c := range l.take() {
					if c.Reason == pgsource.ReasonDefinitions {
						got = append(got, c)
					}
				}
				if tc.want && len(got) == 0 {
					t.Errorf("%s: no change of definitions seen", tc.what)
				}
				if !tc.want && len(got) > 0 {
					t.Errorf("%s: %d changes of definitions seen; want none", tc.what, len(got))
				}
				for _, c := range got {
					if c.LSN == 0 || c.Xmax == 0 {
						t.Errorf("%s: change %+v has no LSN or xmax", tc.what, c)
					}
				}
			}
		})
	}
}
