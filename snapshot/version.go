package snapshot

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Version names one complete, immutable copy of a dataset: "<client-uuid>-<unix-millis>",
// for example "7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1763737200000". The uuid names the
// process that wrote it; the millis order versions in time.
type Version string

// uuidLen is the length of a canonical UUID string.
const uuidLen = 36

// maxMillis keeps the millis part to 13 digits (until the year 2286) so that manifest
// row keys sort by time.
const maxMillis = 9_999_999_999_999

// ParseVersion parses s as a Version. It returns an error wrapping ErrInvalid that says
// what is wrong when s is not "<uuid>-<unix-millis>".
func ParseVersion(s string) (Version, error) {
	if len(s) < uuidLen+2 || s[uuidLen] != '-' {
		return "", fmt.Errorf("%w version %q: want <uuid>-<unix-millis>", ErrInvalid, Truncate(s, 80))
	}
	id, err := uuid.Parse(s[:uuidLen])
	if err != nil || id.String() != s[:uuidLen] {
		return "", fmt.Errorf("%w version %q: the first 36 characters are not a lowercase uuid", ErrInvalid, Truncate(s, 80))
	}
	digits := s[uuidLen+1:]
	if len(digits) > 13 || (len(digits) > 1 && digits[0] == '0') {
		return "", fmt.Errorf("%w version %q: millis must be 1..13 digits without leading zeros", ErrInvalid, Truncate(s, 80))
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return "", fmt.Errorf("%w version %q: millis must be decimal digits", ErrInvalid, Truncate(s, 80))
		}
	}
	return Version(s), nil
}

// ClientID returns the uuid of the process that wrote v. It assumes v is valid.
func (v Version) ClientID() string { return string(v[:uuidLen]) }

// Millis returns the unix milliseconds part of v. It assumes v is valid.
func (v Version) Millis() int64 {
	n, _ := strconv.ParseInt(string(v[uuidLen+1:]), 10, 64)
	return n
}

// Time returns the moment v was created, at millisecond precision.
func (v Version) Time() time.Time { return time.UnixMilli(v.Millis()).UTC() }

// String returns v as text.
func (v Version) String() string { return string(v) }

// VersionGen makes Versions for one process. Versions it makes are unique and strictly
// increasing in their millis part, even when asked twice within one millisecond or
// when the wall clock steps back: the millis never repeat.
type VersionGen struct {
	client uuid.UUID
	now    func() time.Time

	mu   sync.Mutex
	last int64
}

// NewVersionGen returns a generator for the client id; now defaults to time.Now.
func NewVersionGen(client uuid.UUID, now func() time.Time) *VersionGen {
	if now == nil {
		now = time.Now
	}
	return &VersionGen{client: client, now: now}
}

// Next returns a new Version.
func (g *VersionGen) Next() Version {
	g.mu.Lock()
	defer g.mu.Unlock()
	ms := g.now().UnixMilli()
	if ms <= g.last {
		ms = g.last + 1
	}
	if ms > maxMillis {
		panic("snapshot: clock past the year 2286")
	}
	g.last = ms
	return Version(g.client.String() + "-" + strconv.FormatInt(ms, 10))
}

// Truncate returns s cut to n bytes and marked so, for quoting input in an error.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
