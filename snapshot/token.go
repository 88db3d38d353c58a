package snapshot

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Read-your-writes tokens. A token names a position in the source's history, never a
// version: a writer's transaction id (`x:` || pg_current_xact_id(), taken inside the
// writing transaction) or a snapshot taken after its commit (`s:` ||
// pg_current_snapshot()). A version covers a token by Postgres's own visibility rule
// against the snapshot its manifest records, so no clock is ever compared.

// MaxTokenBytes is the longest token accepted, and the longest one made: a
// snapshot's token that would be longer drops in-progress transactions (from the
// newest), which only makes it stricter.
const MaxTokenBytes = 1024

// TokenKind says what a token names.
type TokenKind int

// Token kinds.
const (
	// TokenXid names one transaction: covered once a version's snapshot sees it.
	TokenXid TokenKind = iota + 1
	// TokenSnapshot names every transaction a snapshot saw committed: covered once a
	// version's snapshot sees all of them.
	TokenSnapshot
)

// Token is a parsed read-your-writes token.
type Token struct {
	Kind TokenKind
	// Xid is the transaction a TokenXid names (a 64-bit xid8, epoch included).
	Xid uint64
	// Snapshot is what a TokenSnapshot names.
	Snapshot PGSnapshot
	// System is the source cluster's system identifier the token names; "" for none.
	System string
	// Version is the version a snapshot token was answered from ("" for none): a
	// version read at the same position (a republish that added a collection, or
	// forced) may be newer, and only the pointer tells which.
	Version Version
}

// PGSnapshot is a Postgres snapshot, pg_current_snapshot()'s "xmin:xmax:xip,…":
// every transaction below Xmin has ended, none at or above Xmax had completed, and
// Xip (ascending) were in progress. Recovery and Next say how a version's snapshot
// was taken; a token's snapshot has neither.
type PGSnapshot struct {
	Xmin, Xmax uint64
	Xip        []uint64
	// Recovery marks a snapshot taken on a hot standby: Postgres keeps the
	// transactions running there out of the printed list, so only what ended below
	// Xmin is known to be seen.
	Recovery bool
	// Next is the transaction id the source would have assigned next (0 when
	// unknown): ids at or above it had not been issued. A running transaction's id
	// may be at or above Xmax, which counts completed transactions only.
	Next uint64
}

// takenSnapshot parses a version's snapshot and records how it was taken.
func takenSnapshot(text string, recovery bool, next uint64) (PGSnapshot, error) {
	sn, err := ParsePGSnapshot(text)
	if err != nil {
		return PGSnapshot{}, err
	}
	sn.Recovery, sn.Next = recovery, next
	return sn, nil
}

// Proven returns what s is known to see, as a snapshot a token may name: s itself,
// or for a snapshot taken in recovery, every transaction below its xmin and nothing
// else.
func (s PGSnapshot) Proven() PGSnapshot {
	if s.Recovery {
		return PGSnapshot{Xmin: s.Xmin, Xmax: s.Xmin}
	}
	return PGSnapshot{Xmin: s.Xmin, Xmax: s.Xmax, Xip: s.Xip}
}

// ErrTokenRejected reports a token no version can ever cover: malformed, naming
// another cluster than the source, or naming a transaction the source had not
// started when the syncer last looked.
var ErrTokenRejected = errors.New("token rejected")

// ErrNotCovered reports a version that does not cover a token where no waiting can
// help: the version was named by the request, or the dataset is pinned at it.
var ErrNotCovered = errors.New("the version does not cover the token")

// ErrNotYetCovered reports that no version covering a token was served within the
// time the request allowed, or that too many requests wait already.
var ErrNotYetCovered = errors.New("no version covers the token yet")

// ParsePGSnapshot parses pg_current_snapshot()'s text form.
func ParsePGSnapshot(s string) (PGSnapshot, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return PGSnapshot{}, fmt.Errorf("snapshot %q: want xmin:xmax:xip,…", clip(s))
	}
	var sn PGSnapshot
	var err error
	if sn.Xmin, err = parseXid(parts[0]); err != nil {
		return PGSnapshot{}, fmt.Errorf("snapshot xmin: %w", err)
	}
	if sn.Xmax, err = parseXid(parts[1]); err != nil {
		return PGSnapshot{}, fmt.Errorf("snapshot xmax: %w", err)
	}
	if sn.Xmin > sn.Xmax {
		return PGSnapshot{}, fmt.Errorf("snapshot %q: xmin is above xmax", clip(s))
	}
	if parts[2] != "" {
		for _, x := range strings.Split(parts[2], ",") {
			n, err := parseXid(x)
			if err != nil {
				return PGSnapshot{}, fmt.Errorf("snapshot in-progress list: %w", err)
			}
			if n < sn.Xmin || n >= sn.Xmax {
				return PGSnapshot{}, fmt.Errorf("snapshot %q: in-progress %d outside [xmin, xmax)", clip(s), n)
			}
			sn.Xip = append(sn.Xip, n)
		}
		slices.Sort(sn.Xip)
		sn.Xip = slices.Compact(sn.Xip)
	}
	return sn, nil
}

// parseXid parses one transaction id: decimal digits only, not 0.
func parseXid(s string) (uint64, error) {
	if s == "" || len(s) > 20 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a transaction id", clip(s))
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%q is not a transaction id", clip(s))
	}
	return n, nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// String is the snapshot as Postgres prints it.
func (s PGSnapshot) String() string {
	var b strings.Builder
	b.WriteString(strconv.FormatUint(s.Xmin, 10))
	b.WriteByte(':')
	b.WriteString(strconv.FormatUint(s.Xmax, 10))
	b.WriteByte(':')
	for i, x := range s.Xip {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(x, 10))
	}
	return b.String()
}

// Sees reports whether a transaction that committed is visible in the snapshot
// (pg_visible_in_snapshot): it ended before xmin, or started before xmax and was not
// in progress. A snapshot taken in recovery is known to see only what ended before
// its xmin.
func (s PGSnapshot) Sees(xid uint64) bool {
	if xid < s.Xmin {
		return true
	}
	if xid >= s.Xmax || s.Recovery {
		return false
	}
	_, inProgress := slices.BinarySearch(s.Xip, xid)
	return !inProgress
}

// Covers reports whether a version read at snapshot s holds every commit the token
// names. A snapshot token covers t when s sees every transaction t saw: s.xmax is at
// least t's, and each transaction s had in progress was in progress for t too, or
// started at or after t's xmax. A token made from s itself is covered by s, also when
// it was shortened to fit MaxTokenBytes (its in-progress list a prefix of s's). That
// exception is looser than the rule for one case: another snapshot with the same
// xmin, xmax and list prefix, read while more than ~48 transactions were in progress
// and no xid was assigned between the two, is taken to cover it too. A snapshot taken
// in recovery covers a snapshot token only when the token's xmax is at most its xmin.
func (s PGSnapshot) Covers(t Token) bool {
	switch t.Kind {
	case TokenXid:
		return s.Sees(t.Xid)
	case TokenSnapshot:
		ts := t.Snapshot
		if s.Recovery {
			return ts.Xmax <= s.Xmin
		}
		if s.Xmax < ts.Xmax {
			return false
		}
		covered := true
		for _, x := range s.Xip {
			if x >= ts.Xmax {
				break
			}
			if _, ok := slices.BinarySearch(ts.Xip, x); !ok {
				covered = false
				break
			}
		}
		if covered {
			return true
		}
		return s.Xmin == ts.Xmin && s.Xmax == ts.Xmax && len(ts.Xip) < len(s.Xip) &&
			slices.Equal(ts.Xip, s.Xip[:len(ts.Xip)]) && len(t.String()) > MaxTokenBytes-21
	}
	return false
}

// Future reports whether the token names a transaction the source had not started
// when it took snapshot s: no version read from the source will ever cover it (a
// caller's mistake, or a token from another cluster with the same identity). An x:
// token is judged by the id the source would have assigned next, never by xmax (a
// running transaction's id may be above it); without that id, or on a standby, no
// token is future.
func (s PGSnapshot) Future(t Token) bool {
	if s.Recovery {
		return false
	}
	switch t.Kind {
	case TokenXid:
		return s.Next > 0 && t.Xid >= s.Next
	case TokenSnapshot:
		return t.Snapshot.Xmax > s.Xmax
	}
	return false
}

// Narrow reports whether t names a 32-bit transaction id (a row's xmin, ::xid,
// backend_xid) of a source whose ids are past 2^32 at snapshot s: the id's epoch is
// lost, and judged as a 64-bit id it would seem to have ended long ago, covered by
// every version. Only pg_current_xact_id() makes an x: token; such a token is
// refused, never covered.
func (s PGSnapshot) Narrow(t Token) bool {
	return t.Kind == TokenXid && t.Xid < 1<<32 && s.Xmin >= 1<<32
}

// NarrowError returns the error that refuses a token Narrow reports, else nil.
func (s PGSnapshot) NarrowError(t Token) error {
	if !s.Narrow(t) {
		return nil
	}
	return fmt.Errorf("%w: %w: token %s names a 32-bit transaction id, but the source's ids are past 2^32 (its snapshot is %d:%d:…): make x: tokens with pg_current_xact_id() inside the writing transaction",
		ErrInvalid, ErrTokenRejected, clip(t.String()), s.Xmin, s.Xmax)
}

// ParseToken parses a token, "x:<xid>" or "s:<xmin>:<xmax>:<xip,…>", either with an
// optional "@<system identifier>", an s: token with an optional "~<version>" last. A
// bad one is an error wrapping ErrTokenRejected and ErrInvalid that says what is
// wrong.
func ParseToken(s string) (Token, error) {
	t, err := parseToken(s)
	if err != nil {
		return Token{}, fmt.Errorf("%w: %w: %w", ErrInvalid, ErrTokenRejected, err)
	}
	return t, nil
}

func parseToken(s string) (Token, error) {
	switch {
	case s == "":
		return Token{}, errors.New("empty token")
	case len(s) > MaxTokenBytes:
		return Token{}, fmt.Errorf("token of %d bytes, over the limit of %d", len(s), MaxTokenBytes)
	}
	var t Token
	s, version, hasVersion := strings.Cut(s, "~")
	if hasVersion {
		v, err := ParseVersion(version)
		if err != nil || !strings.HasPrefix(s, "s:") {
			return Token{}, fmt.Errorf("token %q: after ~ comes the version a snapshot token was answered from", clip(s+"~"+version))
		}
		t.Version = v
	}
	body, system, hasSystem := strings.Cut(s, "@")
	if hasSystem {
		if system == "" || len(system) > 20 || strings.TrimLeft(system, "0123456789") != "" {
			return Token{}, fmt.Errorf("token %q: the system after @ must be a system identifier (digits)", clip(s))
		}
		t.System = system
	}
	kind, rest, _ := strings.Cut(body, ":")
	switch kind {
	case "x":
		xid, err := parseXid(rest)
		if err != nil {
			return Token{}, fmt.Errorf("token %q: %w", clip(s), err)
		}
		t.Kind, t.Xid = TokenXid, xid
	case "s":
		sn, err := ParsePGSnapshot(rest)
		if err != nil {
			return Token{}, fmt.Errorf("token %q: %w", clip(s), err)
		}
		t.Kind, t.Snapshot = TokenSnapshot, sn
	default:
		return Token{}, fmt.Errorf("token %q: want x:<xid> or s:<xmin>:<xmax>:<xip,…> (from pg_current_xact_id() or pg_current_snapshot())", clip(s))
	}
	return t, nil
}

// String is the token's wire form.
func (t Token) String() string {
	var s string
	switch t.Kind {
	case TokenXid:
		s = "x:" + strconv.FormatUint(t.Xid, 10)
	case TokenSnapshot:
		s = "s:" + t.Snapshot.String()
	default:
		return ""
	}
	if t.System != "" {
		s += "@" + t.System
	}
	if t.Version != "" && t.Kind == TokenSnapshot {
		s += "~" + string(t.Version)
	}
	return s
}

// Ties reports whether the snapshot sn and the snapshot token t see the same
// transactions (each covers the other), while t names another version than v, the
// one read at sn: which of the two is newer, only the pointer tells.
func (sn PGSnapshot) Ties(t Token, v Version) bool {
	if t.Kind != TokenSnapshot || t.Version == "" || t.Version == v || !sn.Covers(t) {
		return false
	}
	back := Token{Kind: TokenSnapshot, Snapshot: sn.Proven()}
	return t.Snapshot.Covers(back)
}

// SnapshotToken returns the token naming everything snapshot s saw, from cluster
// system ("" to name none), at most MaxTokenBytes long: a longer one drops the newest
// in-progress transactions, which makes it stricter, never looser. A snapshot that
// does not parse gives "".
func SnapshotToken(snapshot, system string) string {
	sn, err := ParsePGSnapshot(snapshot)
	if err != nil {
		return ""
	}
	return provenToken(sn, system, "")
}

// Token returns the token naming what version v, read at p, is known to hold: its
// snapshot's (Proven), from its cluster, naming v ("" for none); "" when the snapshot
// does not parse.
func (p Position) Token(v Version) string {
	sn, err := p.PGSnapshot()
	if err != nil {
		return ""
	}
	return provenToken(sn, SystemIdentifier(p.System), v)
}

// Token returns the token naming what the coverage proves of its version, from
// cluster system (a Position.System); "" when its snapshot does not parse.
func (c Coverage) Token(system string) string {
	sn, err := c.PGSnapshot()
	if err != nil {
		return ""
	}
	return provenToken(sn, SystemIdentifier(system), c.Version)
}

// provenToken is SnapshotToken of what sn is known to see, naming version v.
func provenToken(sn PGSnapshot, system string, v Version) string {
	t := Token{Kind: TokenSnapshot, Snapshot: sn.Proven(), System: system, Version: v}
	s := t.String()
	for len(s) > MaxTokenBytes && len(t.Snapshot.Xip) > 0 {
		drop := max(1, (len(s)-MaxTokenBytes)/21)
		t.Snapshot.Xip = t.Snapshot.Xip[:max(0, len(t.Snapshot.Xip)-drop)]
		s = t.String()
	}
	return s
}

// SystemIdentifier returns the cluster's system identifier from a Position.System
// ("<system identifier>:<database oid>:<timeline>"), or "" when it names none.
func SystemIdentifier(system string) string {
	id, _, _ := strings.Cut(system, ":")
	return id
}

// CheckSystem refuses a token naming another cluster than system (a
// Position.System); a token or a source that names none passes.
func (t Token) CheckSystem(system string) error {
	id := SystemIdentifier(system)
	if t.System == "" || id == "" || t.System == id {
		return nil
	}
	return fmt.Errorf("%w: %w: token names cluster %s, the dataset's source is cluster %s", ErrInvalid, ErrTokenRejected, t.System, id)
}
