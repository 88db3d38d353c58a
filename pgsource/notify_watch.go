package pgsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snapflip/snapflip/internal/retry"
)

// The watch's side of the notify mode (notify.go): installing the triggers at each
// resolve, and what it does with trouble after start-up, which it logs and leaves to
// the statistics poll; and the listener.

// lockWait spaces out the tries of a trigger whose table's lock was not had in time:
// each try queues the table's writers for up to notifyLockTimeout.
type lockWait struct {
	fails int // lock timeouts in a row
	next  int // the resolve from which it is tried again
}

// maxLockBackoff is the most resolves a table whose lock was not had in time waits for
// its next try (16 minutes with the default WatchConfig.Resolve).
const maxLockBackoff = 16

// listenRetry is the wait before listening again after failing to.
var listenRetry = 3 * time.Second

// install installs the triggers for oids, as each resolve does in notify mode, and
// stores the tables whose notifications count; it returns attributes for the log.
// Only at start-up (until an install succeeds) does it return ErrNotifySetup, as it
// does ctx's error: later, notify trouble is logged, the tables it affects are left
// to the poll, and their install is tried again at the next resolve, or, for a table
// whose lock was not had in time, after 1, 2, 4 ... up to maxLockBackoff resolves.
func (w *watch) install(ctx context.Context, conn *pgx.Conn, oids []uint32) ([]any, error) {
	w.resolves++
	if w.lockWaits == nil {
		w.lockWaits = map[string]lockWait{}
	}
	putOff := func(table string) bool {
		lw, ok := w.lockWaits[table]
		return ok && w.resolves < lw.next
	}
	res, err := installNotify(ctx, conn, oids, !w.started, putOff)
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil && !w.started && errors.Is(err, ErrNotifySetup):
		return nil, err
	case err != nil:
		// The triggers in place stay, and so do the tables whose notifications count.
		w.report(ctx, "install", "the notify watch cannot install its triggers; the statistics poll carries on, "+
			"and they are tried again at the next resolve", err)
		return nil, nil
	}
	w.started = true
	set := make(map[string]bool, len(res.tables))
	for _, t := range res.tables {
		set[t] = true
	}
	w.notify.Store(&set)
	for t := range w.lockWaits {
		if !slices.Contains(res.pollOnly, t) { // it has the trigger now, or is no longer watched
			delete(w.lockWaits, t)
		}
	}
	for _, t := range res.lockTimeouts {
		lw := w.lockWaits[t]
		lw.fails++
		lw.next = w.resolves + retry.Doubling(1, maxLockBackoff, lw.fails-1)
		w.lockWaits[t] = lw
	}
	w.settled(ctx, "install", "the notify watch installs its triggers again")
	// Each table's trouble is logged once, and again only when it changes.
	if w.tableTrouble == nil {
		w.tableTrouble = map[string]string{}
	}
	for _, tt := range res.troubles {
		fresh := false
		for _, t := range tt.tables {
			if w.tableTrouble[t] != tt.err.Error() {
				w.tableTrouble[t], fresh = tt.err.Error(), true
			}
		}
		if !fresh {
			continue
		}
		level, msg := slog.LevelWarn, "the notify watch could not install its trigger; the statistics poll covers the table, "+
			"and the trigger is tried again at the next resolve"
		switch {
		case isCode(tt.err, "55P03"):
			msg = "the notify watch could not install its trigger in time; the statistics poll covers the table, " +
				"and the trigger is tried again at a later resolve"
		case errors.Is(tt.err, ErrNotifySetup):
			level, msg = slog.LevelError, "the notify watch may not install its trigger; the statistics poll covers the table, "+
				"and the trigger is tried again at the next resolve"
		}
		w.log.Log(ctx, level, msg, "tables", tt.tables, "err", tt.err)
	}
	var installed []string
	for t := range w.tableTrouble {
		if !slices.Contains(res.pollOnly, t) { // it has the trigger now, or is no longer watched
			delete(w.tableTrouble, t)
			if slices.Contains(res.tables, t) {
				installed = append(installed, t)
			}
		}
	}
	if len(installed) > 0 {
		slices.Sort(installed)
		w.log.InfoContext(ctx, "the notify watch installed the triggers it could not before", "tables", installed)
	}
	w.installKey = fmt.Sprint(res.tables, res.pollOnly)
	attrs := []any{"triggers", len(res.tables)}
	if len(res.pollOnly) > 0 {
		attrs = append(attrs, "polled_only", res.pollOnly)
	}
	return attrs, nil
}

// report logs notify trouble of a kind (install, listen) that the poll is left to
// cover: as an error when it needs someone to act (ErrNotifySetup), else as a warning;
// and only when it differs from the last of its kind, not at every resolve or retry.
func (w *watch) report(ctx context.Context, kind, msg string, err error, attrs ...any) {
	if ctx.Err() != nil || w.trouble[kind] == err.Error() {
		return
	}
	if w.trouble == nil {
		w.trouble = map[string]string{}
	}
	w.trouble[kind] = err.Error()
	level := slog.LevelWarn
	if errors.Is(err, ErrNotifySetup) {
		level = slog.LevelError
	}
	w.log.Log(ctx, level, msg, append(attrs, "err", err)...)
}

// settled logs msg when trouble of the kind was reported last, and forgets it.
func (w *watch) settled(ctx context.Context, kind, msg string) {
	if w.trouble[kind] != "" {
		delete(w.trouble, kind)
		w.log.InfoContext(ctx, msg)
	}
}

// listenKeepAlive is how long the listener waits in silence before it checks its
// connection with a round trip: a connection dropped on the way (a NAT's idle
// timeout) would otherwise leave it waiting forever, unnoticed, while the poll alone
// carries on.
var listenKeepAlive = 30 * time.Second

// listener turns the notifications on a connection of its own into Changes.
type listener struct {
	notes  chan Change
	errc   chan error // the error that ended it (not ctx's)
	cancel context.CancelFunc
	done   chan struct{}
}

// ListenSuffix ends the application_name of the listening connection: the syncer's
// ("snapflip-syncer", or the DSN's) followed by it, "snapflip-syncer-listen" by
// default, so that DBAs can tell it in pg_stat_activity from the poll's connection.
const ListenSuffix = "-listen"

// listen connects, LISTENs and starts receiving; it stops, closing its connection,
// when ctx ends, the connection fails, or stop is called. A standby (where LISTEN is
// refused) is ErrNotifySetup.
func (w *watch) listen(ctx context.Context) (*listener, error) {
	cfg := w.src.cfg.Copy()
	cfg.RuntimeParams = maps.Clone(w.src.cfg.RuntimeParams)
	cfg.RuntimeParams["application_name"] += ListenSuffix
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, w.src.connectError(err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		_ = closeConn(ctx, conn)
		if isCode(err, "25006") {
			return nil, fmt.Errorf("%w: listen: %v: the source is a standby, where notifications are not sent: point "+
				"postgres.dsn at the primary, or use watch.mode: stats, which works on a standby", ErrNotifySetup, err)
		}
		return nil, fmt.Errorf("listen: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	l := &listener{notes: make(chan Change), errc: make(chan error, 1), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		defer closeConn(ctx, conn)
		if err := w.receive(ctx, conn, l.notes); ctx.Err() == nil {
			l.errc <- fmt.Errorf("listen for notifications: %w", err)
		}
	}()
	return l, nil
}

// stop stops l, if any, and returns once its connection is closed.
func (l *listener) stop() {
	if l != nil {
		l.cancel()
		<-l.done
	}
}

// receive waits for notifications and sends one Change per batch of those naming a
// watched table, with the position read after them.
func (w *watch) receive(ctx context.Context, conn *pgx.Conn, notes chan<- Change) error {
	for {
		n, err := nextNotification(ctx, conn)
		if err != nil {
			return err
		}
		tables := w.notified(nil, n)
		for n = buffered(conn); n != nil; n = buffered(conn) {
			tables = w.notified(tables, n)
		}
		if len(tables) == 0 {
			continue
		}
		// After the notifications: their transactions are finished in this snapshot.
		var lsnText, xmaxText string
		if err := conn.QueryRow(ctx, positionSQL).Scan(&lsnText, &xmaxText); err != nil {
			return fmt.Errorf("read the position: %w", err)
		}
		lsn, xm, err := parsePosition(lsnText, xmaxText)
		if err != nil {
			return err
		}
		slices.Sort(tables)
		select {
		case notes <- Change{LSN: lsn, Xmax: xm, At: time.Now(), Reason: ReasonNotify, Tables: tables}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// notified adds n's table to tables when n names a watched table not already there.
func (w *watch) notified(tables []string, n *pgconn.Notification) []string {
	if n == nil || n.Channel != NotifyChannel || slices.Contains(tables, n.Payload) {
		return tables
	}
	if set := w.notify.Load(); set != nil && (*set)[n.Payload] {
		tables = append(tables, n.Payload)
	}
	return tables
}

// nextNotification waits for a notification, checking the connection with a round
// trip after each listenKeepAlive of silence.
func nextNotification(ctx context.Context, conn *pgx.Conn) (*pgconn.Notification, error) {
	for {
		wctx, cancel := context.WithTimeout(ctx, listenKeepAlive)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			return n, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case !pgconn.Timeout(err) || conn.IsClosed():
			return nil, err
		}
		// A timeout leaves the connection usable (pgconn closes it on other errors).
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("keep-alive: %w", err)
		}
	}
}

// buffered returns a notification pgx has received already (during a query), or nil,
// without waiting: WaitForNotification hands out a buffered one before it looks at its
// context, and with a context already done it reads nothing from the connection.
func buffered(conn *pgx.Conn) *pgconn.Notification {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n, _ := conn.WaitForNotification(ctx)
	return n
}
