package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/internal/cli"
	"github.com/snapflip/snapflip/pgtoken"
)

// TestReadYourWrites: against the real API and syncer, a write's token is not
// covered before a sync publishes it (the API says so once its wait passes, at once
// for a version named); right after the sync, without waiting for the API to see it,
// a read with it is answered from the new version, which holds the write, as is every
// kind of read and SnapshotAfter; a snapshot token taken after the commit works
// alike; the answers teach the client its session token. A replica's WaitFor returns the version
// a sync publishes, and the version held when a sync finds nothing new, without a
// flip.
func TestReadYourWrites(t *testing.T) {
	e := start(t, config)
	v1 := e.sync(t)
	e.await(t, v1)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	commit := func(sql string) string { // a write and its token
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
		tok, err := pgtoken.FromTx(ctx, tx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return tok
	}
	write := commit(`UPDATE docs SET note = 'written' WHERE id = 'plain'`)
	now, err := pgtoken.Now(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, e.Base, nil)

	short, cancel := context.WithTimeout(ctx, 3*time.Second) // asks the API to wait 1s
	_, err = c.Get(short, "docs", "plain", After(write))
	cancel()
	if !errors.Is(err, ErrNotYetCovered) {
		t.Errorf("Get After a write no sync published = %v; want ErrNotYetCovered", err)
	}
	snap1, err := c.Pin(v1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := snap1.Get(ctx, "docs", "plain", After(write)); !errors.Is(err, ErrNotCovered) {
		t.Errorf("Get of version %s After a later write = %v; want ErrNotCovered", v1, err)
	}
	if _, err := c.Get(ctx, "docs", "plain", After("x:5@1")); !errors.Is(err, ErrTokenRejected) || !errors.Is(err, ErrBadRequest) {
		t.Errorf("Get After another cluster's token = %v; want ErrTokenRejected", err)
	}

	v2 := e.sync(t)
	for _, tok := range []string{write, now} {
		d, err := c.Get(ctx, "docs", "plain", After(tok))
		if err != nil || d.Version != v2 || !strings.Contains(string(d.JSON), `"written"`) {
			t.Errorf("Get After %s right after the sync = %s from %q, %v; want the write from %s", tok, d.JSON, d.Version, err, v2)
		}
		docs, _, got, err := c.BatchGet(ctx, "docs", []string{"plain", "a/b"}, After(tok))
		if err != nil || got != v2 || !strings.Contains(string(docs["plain"].JSON), `"written"`) {
			t.Errorf("BatchGet After %s = version %q, %v; want the write from %s", tok, got, err, v2)
		}
		for d, err := range c.List(ctx, "docs", ListOptions{PageSize: 10}, After(tok)) {
			if err != nil || d.Version != v2 {
				t.Errorf("List After %s: %q from %q, %v; want %s", tok, d.ID, d.Version, err, v2)
				break
			}
		}
		if s, err := c.SnapshotAfter(ctx, tok); err != nil || s.Version() != v2 {
			t.Errorf("SnapshotAfter %s = %v, %v; want version %s", tok, s, err, v2)
		}
	}
	session := c.SessionToken()
	if tok, err := parseToken(session); err != nil || !tok.isSnapshot() {
		t.Errorf("session token %q after reading %s: %v; want a snapshot's token", session, v2, err)
	}
	if d, err := c.Get(ctx, "docs", "plain"); err != nil || d.Version != v2 {
		t.Errorf("Get with the session's token = %q, %v; want %s", d.Version, err, v2)
	}

	cfg := DefaultReplicaConfig()
	cfg.Collections = []string{"docs"}
	r, err := NewReplica(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	<-r.Ready()
	if v, err := r.WaitFor(ctx, write); err != nil || v.Version() != v2 {
		t.Errorf("WaitFor a published write = %q, %v; want %s", v.Version(), err, v2)
	}

	again := commit(`UPDATE docs SET note = 'again' WHERE id = 'plain'`)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	wait := waitFor(wctx, r, again)
	v3 := e.sync(t)
	got := receive(t, wait, "WaitFor a write, then a sync")
	if got.err != nil || got.version != v3 {
		t.Errorf("WaitFor a write, then a sync = %+v; want %s", got, v3)
	}
	if v, _ := r.WaitFor(ctx, again); !strings.Contains(plain(v), `"again"`) {
		t.Errorf("the view covering the write holds %s; want it", plain(v))
	}

	// A write the dataset does not read: the sync publishes nothing, and proves the
	// version held covers it.
	commit(`CREATE TABLE elsewhere (id int)`)
	other := commit(`INSERT INTO elsewhere VALUES (1)`)
	wait = waitFor(wctx, r, other)
	if out := e.syncOnce(t); !strings.HasPrefix(out, "unchanged") {
		t.Fatalf("syncer once said %q; want unchanged", out)
	}
	got = receive(t, wait, "WaitFor a write elsewhere, then a sync")
	if got.err != nil || got.version != v3 || r.Stats().Flips != 1 {
		t.Errorf("WaitFor a write elsewhere, then a sync = %+v after %d flips; want %s, no flip more", got, r.Stats().Flips, v3)
	}
}

// plain returns the document "plain" a view holds; "" for none.
func plain(v View) string {
	d, _ := v.Get("docs", "plain")
	return string(d.JSON)
}

// syncOnce runs `syncer once` in-process and returns what it said, whether it
// published or not.
func (e *env) syncOnce(tb testing.TB) string {
	tb.Helper()
	var out bytes.Buffer
	s := &cli.Syncer{Getenv: e.Getenv, Stdout: &out, Stderr: io.Discard}
	if err := s.Run(context.Background(), []string{"once"}); err != nil {
		tb.Fatalf("syncer once: %v", err)
	}
	return out.String()
}
