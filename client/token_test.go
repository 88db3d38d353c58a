package client

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// longSnapshot returns an "s:" token of n in-progress transactions from xmin, with
// xmax after them, and the suffix (a system, or "").
func longSnapshot(xmin uint64, n int, xmax uint64, suffix string) string {
	xip := make([]string, n)
	for i := range xip {
		xip[i] = strconv.FormatUint(xmin+uint64(i), 10)
	}
	return "s:" + strconv.FormatUint(xmin, 10) + ":" + strconv.FormatUint(xmax, 10) + ":" + strings.Join(xip, ",") + suffix
}

func TestParseToken(t *testing.T) {
	for _, tc := range []struct {
		in   string
		good bool
	}{
		{"x:1", true},
		{"x:18446744073709551615", true},
		{"x:748@7374838129836109823", true},
		{"s:748:748:", true}, // Postgres prints an empty in-progress list with its colon
		{"s:740:750:741,745", true},
		{"s:740:750:745,741,745", true}, // out of order, repeated: as a set
		{"s:740:750:741@1", true},
		{longSnapshot(1_000_000_000, 91, 2_000_000_000, ""), true}, // 1,024 bytes
		{"", false},
		{"x:", false},
		{"x:0", false},
		{"x:-1", false},
		{"x:+1", false},
		{"x:1_000", false},
		{"x:18446744073709551616", false},
		{"x: 1", false},
		{"x:1@", false},
		{"x:1@abc", false},
		{"x:1@1@2", false},
		{"s:748:748", false}, // no in-progress field
		{"s:748:748:,", false},
		{"s:748:747:", false}, // xmin above xmax
		{"s:740:750:750", false},
		{"s:740:750:739", false},
		{"s:740:750:741:", false},
		{"s:740:750:741,", false}, // cut in the list
		{"s:740:75", false},
		{"s:0:1:", false},
		{"y:1", false},
		{"X:1", false},
		{"740:750:", false}, // pg_current_snapshot() without the prefix
		{"1234", false},
		{longSnapshot(1_000_000_000, 92, 2_000_000_000, ""), false}, // 1,035 bytes
	} {
		_, err := parseToken(tc.in)
		if got := err == nil; got != tc.good {
			t.Errorf("parseToken(%q) = %v; want good %v", truncate(tc.in, 60), err, tc.good)
		}
	}
}

func TestTokenCovers(t *testing.T) {
	long := longSnapshot(1_000_000_000, 91, 2_000_000_000, "") // 1,024 bytes: 1000000000..1000000090 in progress
	cut := longSnapshot(1_000_000_000, 90, 2_000_000_000, "")  // the same snapshot, shortened by one more
	for _, tc := range []struct {
		s, t string
		want bool
	}{
		// x: a transaction the snapshot sees committed.
		{"s:748:748:", "x:747", true},
		{"s:748:748:", "x:748", false}, // not started when the snapshot was taken
		{"s:740:750:745", "x:745", false},
		{"s:740:750:745", "x:744", true},
		{"s:740:750:745", "x:746", true},
		{"s:740:750:745", "x:739", true},
		{"s:740:750:745", "x:750", false},
		// s: every transaction the token's snapshot saw, the snapshot sees.
		{"s:748:748:", "s:748:748:", true},
		{"s:749:749:", "s:748:748:", true},
		{"s:748:748:", "s:749:749:", false},
		{"s:740:750:745", "s:740:750:745", true},
		{"s:740:750:745", "s:740:750:", false}, // the token saw 745 committed
		{"s:740:750:", "s:740:750:745", true},
		{"s:740:760:745,755", "s:740:750:745", true}, // 755 started after the token
		{"s:740:760:745,746", "s:740:750:745", false},
		{"s:740:760:741", "s:745:750:", false}, // 741 had ended for the token
		{"s:740:750:745", "s:740:760:", false}, // the token saw 750..759
		// A system identifier: another cluster's token is never covered.
		{"s:748:748:@1", "x:747@1", true},
		{"s:748:748:@1", "x:747@2", false},
		{"s:748:748:@1", "x:747", true},
		{"s:748:748:", "s:700:700:@2", true},
		{"s:748:748:@1", "s:700:700:@2", false},
		// Only a snapshot covers anything.
		{"x:800", "x:1", false},
		// A long token the API may have shortened: it is read as seeing nothing above
		// the last transaction it lists, for the dropped ones may be in progress.
		{long, "x:1000000091", false},
		{long, "x:1999999999", false},
		{long, "x:999999999", true},
		{long, "x:1000000090", false},
		{long, "x:1000000092", false},
		{"s:1000000000:2000000000:1000000000", "x:1999999999", true}, // short: not shortened
		// A shortened token is covered by the snapshot it was cut from (and by itself).
		{long, cut, true},
		{cut, cut, true},
		{cut, long, false},
		{"s:1000000000:2000000000:1000000000", cut, true}, // in progress for both alone
		{"s:1000000000:2000000000:1000000001", cut, true},
		{"s:1000000000:2000000000:1000000095", cut, false}, // the token saw 1000000095 committed
	} {
		s, err := parseToken(tc.s)
		if err != nil {
			t.Fatalf("parseToken(%q): %v", truncate(tc.s, 60), err)
		}
		tok, err := parseToken(tc.t)
		if err != nil {
			t.Fatalf("parseToken(%q): %v", truncate(tc.t, 60), err)
		}
		if got := s.covers(tok); got != tc.want {
			t.Errorf("%q covers %q = %v; want %v", truncate(tc.s, 60), truncate(tc.t, 60), got, tc.want)
		}
	}
}

func TestNewerToken(t *testing.T) {
	for _, tc := range []struct{ kept, answered, want string }{
		{"", "s:748:748:", "s:748:748:"},
		{"s:748:748:", "s:750:750:", "s:750:750:"},
		{"s:750:750:", "s:748:748:", "s:750:750:"}, // an older version's: never back
		{"s:740:750:745", "s:740:750:", "s:740:750:"},
		{"s:740:750:", "s:740:750:745", "s:740:750:"},
		{"s:725:730:726", "s:727:729:", "s:725:730:726"}, // neither covers the other: keep
		{"s:727:729:", "s:725:730:726", "s:727:729:"},
		{"s:748:748:", "", "s:748:748:"},
		{"s:748:748:", "garbage", "s:748:748:"},
		{"s:748:748:", "x:900", "s:748:748:"}, // not a snapshot
		{"s:748:748:@1", "s:900:900:@2", "s:748:748:@1"},
		{"garbage", "s:748:748:", "s:748:748:"},
	} {
		if got := newer(tc.kept, tc.answered); got != tc.want {
			t.Errorf("newer(%q, %q) = %q; want %q", tc.kept, tc.answered, got, tc.want)
		}
	}
}

func TestSessionForget(t *testing.T) {
	var s lastToken
	s.learn("s:748:748:")
	s.learn("s:750:750:")
	s.forget("s:748:748:") // replaced meanwhile: kept
	if got := s.get(); got != "s:750:750:" {
		t.Errorf("after forgetting an older token: %q; want s:750:750:", got)
	}
	s.forget("s:750:750:")
	if got := s.get(); got != "" {
		t.Errorf("after forgetting it: %q; want none", got)
	}
	s.learn("s:700:700:") // the rolled-back version's: back is allowed once forgotten
	if got := s.get(); got != "s:700:700:" {
		t.Errorf("after forgetting, learning an older token: %q; want it", got)
	}
}

func TestRejectedMatches(t *testing.T) {
	_, err := parseToken("nope")
	err = rejected("get: After", err)
	if !errors.Is(err, ErrTokenRejected) || !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("rejected = %v; want ErrTokenRejected and ErrBadRequest, naming the token", err)
	}
}

// TestSessionConcurrent: tokens learnt from many goroutines at once, in any order,
// leave the newest, and the session never goes back meanwhile.
func TestSessionConcurrent(t *testing.T) {
	var s lastToken
	const writers, each = 8, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				n := 1000 + (i*writers+w*7919)%(writers*each) // every value once, shuffled
				s.learn(fmt.Sprintf("s:%d:%d:", n, n))
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	last := token{}
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		got := s.get()
		if got == "" {
			continue
		}
		tok, err := parseToken(got)
		if err != nil || !tok.covers(last) {
			t.Fatalf("session went from %q to %q", last.raw, got)
		}
		last = tok
	}
	if want := fmt.Sprintf("s:%d:%d:", 999+writers*each, 999+writers*each); s.get() != want {
		t.Errorf("session = %q; want the newest, %q", s.get(), want)
	}
}
