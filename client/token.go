package client

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Read-your-writes tokens name a position in the source's history: "x:<xid>" a
// writer's transaction, "s:<xmin>:<xmax>:<xip,…>" everything a Postgres snapshot saw
// committed, either with "@<system identifier>"; the API's own "s:" tokens end with
// "~<version>", the version they were answered from, which orders two versions read
// at the same position. The API decides what covers what; the
// client parses tokens only to refuse a malformed one before sending it, to keep the
// newer of two tokens it was answered with, and for a Replica to tell whether a version it holds
// covers one. The rules are Postgres's visibility rules, as the API applies them.

// HeaderToken is the header that names the snapshot of the version an answer came from
// (an "s:" token).
const HeaderToken = "Snapshot-Token"

// headerAfter is the header that asks for an answer from a version covering a token.
const headerAfter = "Snapshot-After"

// maxTokenBytes is the longest token the API takes, and the longest it makes: it
// shortens a longer snapshot token by dropping its newest in-progress transactions.
const maxTokenBytes = 1024

// token is a parsed token.
type token struct {
	raw        string
	xid        uint64 // an "x:" token's transaction; 0 for an "s:" token
	xmin, xmax uint64 // an "s:" token's snapshot
	xip        []uint64
	system     string // "" when it names no cluster
	version    string // the version an API's "s:" token was answered from; "" for none
}

// parseToken parses a token as the API does; the error says what is wrong.
func parseToken(s string) (token, error) {
	if s == "" || len(s) > maxTokenBytes {
		return token{}, fmt.Errorf("token of %d bytes: want 1 to %d", len(s), maxTokenBytes)
	}
	t := token{raw: s}
	s, version, versioned := strings.Cut(s, "~")
	if versioned {
		if !strings.HasPrefix(s, "s:") || !validVersion(version) {
			return token{}, fmt.Errorf("token %q: after ~ comes the version a snapshot token was answered from", truncate(t.raw, 80))
		}
		t.version = version
	}
	body, system, named := strings.Cut(s, "@")
	if named {
		if _, err := parseXid(system); err != nil {
			return token{}, fmt.Errorf("token %q: the system after @ must be a system identifier (digits)", truncate(s, 80))
		}
		t.system = system
	}
	var err error
	switch kind, rest, _ := strings.Cut(body, ":"); kind {
	case "x":
		t.xid, err = parseXid(rest)
	case "s":
		err = t.parseSnapshot(rest)
	default:
		err = errors.New("want x:<xid> or s:<xmin>:<xmax>:<xip,…>")
	}
	if err != nil {
		return token{}, fmt.Errorf("token %q: %w", truncate(s, 80), err)
	}
	return t, nil
}

// validVersion reports whether v looks like a version id: "<uuid>-<unix millis>".
func validVersion(v string) bool {
	return len(v) > 37 && len(v) <= 50 && v[36] == '-' && strings.Trim(v, "0123456789abcdef-") == ""
}

// parseSnapshot parses pg_current_snapshot()'s text, whose in-progress list may be
// empty ("748:748:").
func (t *token) parseSnapshot(s string) error {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return errors.New("want s:<xmin>:<xmax>:<xip,…>")
	}
	var err error
	if t.xmin, err = parseXid(parts[0]); err != nil {
		return err
	}
	if t.xmax, err = parseXid(parts[1]); err != nil {
		return err
	}
	if t.xmin > t.xmax {
		return errors.New("xmin is above xmax")
	}
	if parts[2] == "" {
		return nil
	}
	for _, f := range strings.Split(parts[2], ",") {
		x, err := parseXid(f)
		if err != nil {
			return err
		}
		if x < t.xmin || x >= t.xmax {
			return fmt.Errorf("in-progress %d outside [xmin, xmax)", x)
		}
		t.xip = append(t.xip, x)
	}
	slices.Sort(t.xip)
	t.xip = slices.Compact(t.xip)
	return nil
}

// parseXid parses a transaction id (or a system identifier): decimal digits, not 0.
func parseXid(s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64) // digits only: no sign, no underscores
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%q is not a transaction id", truncate(s, 40))
	}
	return n, nil
}

// isSnapshot reports whether t is an "s:" token.
func (t token) isSnapshot() bool { return t.xid == 0 }

// shortened reports whether the API may have dropped in-progress transactions from
// the snapshot token t to fit maxTokenBytes: it drops them one at a time, 21 bytes at
// most each, only from a token that was too long.
func (t token) shortened() bool {
	return t.isSnapshot() && len(t.xip) > 0 && len(t.raw) > maxTokenBytes-21
}

// foreign reports whether t and u name two different clusters.
func (t token) foreign(u token) bool { return t.system != "" && u.system != "" && t.system != u.system }

// covers reports whether a version whose snapshot is the "s:" token s holds every
// commit the token t names: for an "x:" token, s sees the transaction; for an "s:"
// token, s sees every transaction t saw (its xmax is at least t's, and each
// transaction in progress for s was in progress for t too, or started at or after
// t's xmax). Tokens of two clusters never cover each other.
//
// A shortened s claims as committed the transactions dropped from its list, all above
// the last one listed: above that, it is read as seeing nothing, so a claim is never
// more than the version holds. A shortened t is covered by the snapshot it was cut
// from, as the API rules.
func (s token) covers(t token) bool {
	if !s.isSnapshot() || s.foreign(t) {
		return false
	}
	if t.isSnapshot() && t.shortened() && t.xmin == s.xmin && t.xmax == s.xmax &&
		len(t.xip) <= len(s.xip) && slices.Equal(t.xip, s.xip[:len(t.xip)]) {
		return true
	}
	xmax := s.xmax
	if s.shortened() {
		xmax = s.xip[len(s.xip)-1] + 1
	}
	if !t.isSnapshot() {
		_, inProgress := slices.BinarySearch(s.xip, t.xid)
		return t.xid < s.xmin || t.xid < xmax && !inProgress
	}
	if xmax < t.xmax {
		return false
	}
	for _, x := range s.xip {
		if x >= t.xmax {
			break
		}
		if _, ok := slices.BinarySearch(t.xip, x); !ok {
			return false
		}
	}
	return true
}

// narrow reports whether t is an "x:" token of a 32-bit id (a row's xmin, not
// pg_current_xact_id()) while the snapshot s shows the source's ids past 2^32: its
// epoch is lost, and it would seem covered by every version. The API refuses it.
func (s token) narrow(t token) bool {
	return s.isSnapshot() && !t.isSnapshot() && t.xid < 1<<32 && s.xmin >= 1<<32
}

// newer returns the newer of two snapshot tokens: the one that covers the other; a
// when neither does (or b does not parse), so that what is kept never goes back.
func newer(a, b string) string {
	if a == b || b == "" {
		return a
	}
	tb, err := parseToken(b)
	if err != nil || !tb.isSnapshot() {
		return a
	}
	ta, err := parseToken(a)
	if err != nil || tb.covers(ta) {
		return b
	}
	return a
}

// rejected is the error of a token the client refuses to send, or to wait for.
func rejected(op string, err error) error {
	return fmt.Errorf("snapflip: %s: %w: %w: %w", op, ErrTokenRejected, ErrBadRequest, err)
}

// lastToken is the newest snapshot token a Client was answered with, which it sends as
// Snapshot-After so that no read is answered from a version older than one already
// read (monotonic reads, also across replicas of the API). Safe for concurrent use.
type lastToken struct {
	mu  sync.Mutex
	tok string
}

// get returns the token to send; "" for none yet.
func (s *lastToken) get() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tok
}

// learn keeps tok if it is newer than the token kept.
func (s *lastToken) learn(tok string) {
	if tok == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tok = newer(s.tok, tok)
}

// forget drops tok, which no version the API serves covers (an operator rolled the
// dataset back), unless a newer token replaced it meanwhile.
func (s *lastToken) forget(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tok == tok {
		s.tok = ""
	}
}

// SessionToken returns the newest Snapshot-Token the client was answered with, which
// its reads of the current version send as Snapshot-After; "" before the first
// answer naming one, or with monotonic reads off (Config.NoSessionToken). Given to After, to a Replica's WaitFor, or to another process, it asks for a
// version no older than any this client read.
func (c *Client) SessionToken() string {
	if c.tokens == nil {
		return ""
	}
	return c.tokens.get()
}
