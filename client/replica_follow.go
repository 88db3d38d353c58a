package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/snapflip/snapflip/internal/retry"
)

// follower learns of the newest pointer: from the flip stream (GET /v1/watch), and by
// polling the current version while the stream is refused or between two streams. It
// tells its news what it learns and nothing else happens here: what to do with a
// pointer is the replica's to decide.
type follower struct {
	c    *Client
	cfg  ReplicaConfig // PollInterval, StreamRetry, StreamIdle
	news news
}

// news is what a follower tells of what it learns.
type news interface {
	// observe is told of each pointer the API named, newest or not.
	observe(pointer)
	// covered is told that the version p names holds everything the snapshot p.Covers
	// saw, the pointer not having moved.
	covered(p pointer)
	// linked is told whether the API answered: nil when it did, else why not.
	linked(error)
	// Version returns the version held ("" for none), which the stream need not
	// announce again.
	Version() string
}

// maxStreamRetry caps the pause between two attempts to open a flip stream that stays
// refused.
const maxStreamRetry = 30 * time.Second

// run follows until ctx ends.
func (f *follower) run(ctx context.Context) {
	refused := 0 // times in a row the stream was refused
	for ctx.Err() == nil {
		opened, err := f.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if opened {
			refused = 0
		} else {
			f.news.linked(err)
			refused++
		}
		// Flips between two streams are learnt by polling.
		f.poll(ctx, f.pause(refused))
	}
}

// pause returns how long to poll before opening the stream again: StreamRetry after a
// stream that ended or was refused once, doubling with each further refusal up to
// maxStreamRetry.
func (f *follower) pause(refused int) time.Duration {
	if refused <= 1 {
		return f.cfg.StreamRetry
	}
	return retry.Backoff{Initial: f.cfg.StreamRetry, Max: maxStreamRetry}.Delay(refused - 1)
}

// poll asks the API for the current pointer every PollInterval for d, at least once,
// or until ctx ends.
func (f *follower) poll(ctx context.Context, d time.Duration) {
	until := f.c.now().Add(d)
	for {
		cur, err := f.c.current(ctx, consistency{}) // no token: observe drops a pointer older than one seen
		f.news.linked(err)
		if err == nil {
			f.news.observe(cur)
		}
		if !f.c.now().Before(until) || retry.Sleep(ctx, f.cfg.PollInterval) != nil {
			return
		}
	}
}

// stream reads the flip stream until it ends, telling of each flip; opened reports
// whether the API accepted it.
func (f *follower) stream(ctx context.Context) (opened bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := f.open(ctx)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	f.news.linked(nil)
	idle := time.AfterFunc(f.cfg.StreamIdle, cancel)
	defer idle.Stop()
	alive := func() { idle.Reset(f.cfg.StreamIdle) }
	return true, readFlips(resp.Body, alive, f.tell)
}

// tell passes an event of the stream on to the follower's news.
func (f *follower) tell(kind streamEvent, p pointer) {
	if kind == eventCovered {
		f.news.covered(p)
		return
	}
	f.news.observe(p)
}

// watchPath is the flip stream's path.
const watchPath = "/v1/watch"

// open opens the flip stream: an answer that is an event stream, else an error.
func (f *follower) open(ctx context.Context) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.c.url(watchPath, nil), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if err := f.c.authorize(ctx, req); err != nil {
		return nil, &Error{Method: http.MethodGet, Path: f.c.prefix + watchPath, Attempts: 1, Err: err}
	}
	if f.c.cfg.UserAgent != "" {
		req.Header.Set("User-Agent", f.c.cfg.UserAgent)
	}
	if v := f.news.Version(); v != "" {
		req.Header.Set("Last-Event-ID", v) // the current version is not sent again
	}
	resp, err := f.c.http.Do(req)
	if err != nil {
		return nil, &Error{Method: http.MethodGet, Path: f.c.prefix + watchPath, Attempts: 1, Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		e := f.c.problem(request{method: http.MethodGet, path: watchPath}, answer{status: resp.StatusCode, header: resp.Header, body: body})
		e.Attempts = 1
		return nil, e
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		resp.Body.Close()
		return nil, fmt.Errorf("snapflip: GET %s: answered %q, not an event stream", watchPath, truncate(mt, 80))
	}
	return resp, nil
}

// streamEvent is the type of an event of the flip stream, as its "event" field names it.
type streamEvent int

const (
	// eventOther is any event a replica does not act on (the stream's heartbeats).
	eventOther streamEvent = iota
	// eventFlip tells of a flip: its data is the new pointer.
	eventFlip
	// eventCovered tells that the current version, which did not change, holds
	// everything a newer snapshot saw: its data names the version and that snapshot
	// (covers), as a sync that found nothing new to publish proved.
	eventCovered
)

// parseStreamEvent parses an event's type.
func parseStreamEvent(name string) streamEvent {
	switch name {
	case "flip":
		return eventFlip
	case "covered":
		return eventCovered
	}
	return eventOther
}

// maxEventBytes bounds one line of the flip stream.
const maxEventBytes = 1 << 20

// readFlips reads the events of a flip stream until it ends, calling alive for each
// line (which shows the stream is alive) and event for each flip or covered event that
// names a version; other events, and fields it does not know, are a newer API's, and
// ignored. A stream does not end on its own: its end is an error, io.ErrUnexpectedEOF
// when the body ended cleanly.
func readFlips(body io.Reader, alive func(), event func(streamEvent, pointer)) error {
	lines := bufio.NewScanner(body)
	lines.Buffer(make([]byte, 0, 4096), maxEventBytes)
	var kind streamEvent
	var data string
	for lines.Scan() {
		alive()
		line := lines.Text()
		if line == "" { // the event is complete
			if kind != eventOther {
				var ev struct {
					pointer
					Token       string `json:"token"`
					Collections map[string]struct {
						Held *struct {
							Token string `json:"token"`
						} `json:"held"`
					} `json:"collections"`
				}
				if json.Unmarshal([]byte(data), &ev) == nil && versionPattern.MatchString(ev.Version.String()) {
					ev.pointer.Token, ev.pointer.Held = ev.Token, nil
					for name, c := range ev.Collections {
						if c.Held != nil {
							if ev.pointer.Held == nil {
								ev.pointer.Held = map[string]string{}
							}
							ev.pointer.Held[name] = c.Held.Token
						}
					}
					event(kind, ev.pointer)
				}
			}
			kind, data = eventOther, ""
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "event":
			kind = parseStreamEvent(value)
		case "data":
			if data != "" {
				data += "\n"
			}
			data += value
		}
	}
	if err := lines.Err(); err != nil {
		return err
	}
	return io.ErrUnexpectedEOF
}
