package snapshot

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestParseToken(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // String() of the parsed token; "" when it must be refused
	}{
		{"x:748", "x:748"},
		{"x:748@7301234567890123456", "x:748@7301234567890123456"},
		{"s:748:748:", "s:748:748:"},
		{"s:10:20:15,12", "s:10:20:12,15"},
		{"s:10:20:12,12", "s:10:20:12"},
		{"s:10:20:12@42", "s:10:20:12@42"},
		{"", ""},
		{"x:", ""},
		{"x:0", ""},
		{"x:-1", ""},
		{"x:+5", ""},
		{"x:1e3", ""},
		{"x:18446744073709551616", ""},
		{"y:5", ""},
		{"x:5@", ""},
		{"x:5@abc", ""},
		{"x:5@1@2", ""},
		{"s:20:10:", ""},
		{"s:10:20:25", ""},
		{"s:10:20:5", ""},
		{"s:10:20", ""},
		{"s:10:20:11:", ""},
		{"s:10:20:11,,12", ""},
		{"x:5\x00", ""},
		{"x:" + strings.Repeat("9", 2000), ""},
	} {
		got, err := ParseToken(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("ParseToken(%q) = %v, want an error", tc.in, got)
			} else if !errors.Is(err, ErrInvalid) || !errors.Is(err, ErrTokenRejected) {
				t.Errorf("ParseToken(%q): %v does not wrap ErrInvalid and ErrTokenRejected", tc.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseToken(%q): %v", tc.in, err)
			continue
		}
		if got.String() != tc.want {
			t.Errorf("ParseToken(%q).String() = %q, want %q", tc.in, got.String(), tc.want)
		}
	}
}

func mustSnap(t *testing.T, s string) PGSnapshot {
	t.Helper()
	sn, err := ParsePGSnapshot(s)
	if err != nil {
		t.Fatal(err)
	}
	return sn
}

func mustToken(t *testing.T, s string) Token {
	t.Helper()
	tok, err := ParseToken(s)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestCovers(t *testing.T) {
	for _, tc := range []struct {
		snap, token string
		want        bool
	}{
		{"100:105:101,103", "x:99", true},
		{"100:105:101,103", "x:100", true},
		{"100:105:101,103", "x:101", false},
		{"100:105:101,103", "x:104", true},
		{"100:105:101,103", "x:105", false},
		{"100:105:101,103", "s:100:105:101,103", true},
		{"100:105:101,103", "s:100:105:101", false}, // 103 committed for the token
		{"100:105:101,103", "s:100:105:101,102,103", true},
		{"100:105:101,103", "s:100:106:101,103", false},
		{"100:105:101,103", "s:90:104:95,101,103", true},
		{"100:105:101,103", "s:90:102:95,101", true}, // 103 started after the token
		{"100:105:", "s:90:102:95,101", true},
		{"105:110:", "s:100:105:101,103", true},
	} {
		if got := mustSnap(t, tc.snap).Covers(mustToken(t, tc.token)); got != tc.want {
			t.Errorf("snapshot %s covers %s = %v, want %v", tc.snap, tc.token, got, tc.want)
		}
	}
}

// A snapshot token is covered by its own snapshot, also when it was shortened, and a
// shortened token is never looser than the snapshot: no snapshot that misses a commit
// the full one saw covers it.
func TestSnapshotTokenShortened(t *testing.T) {
	var xip []string
	for x := uint64(4_000_000_000); len(xip) < 200; x += 3 {
		xip = append(xip, strconv.FormatUint(x, 10))
	}
	full := "3999999999:4000001000:" + strings.Join(xip, ",")
	sn := mustSnap(t, full)
	tok := SnapshotToken(full, "42")
	if len(tok) > MaxTokenBytes || len(tok) < MaxTokenBytes-21 {
		t.Fatalf("token of %d bytes, want just under %d", len(tok), MaxTokenBytes)
	}
	parsed := mustToken(t, tok)
	if !sn.Covers(parsed) {
		t.Errorf("the snapshot does not cover its own shortened token")
	}
	// A snapshot that lacks a commit the full one saw (4000000998 was committed).
	older := mustSnap(t, "3999999999:4000000998:"+strings.Join(xip, ","))
	if older.Covers(parsed) {
		t.Errorf("an older snapshot covers the shortened token")
	}
	// Dropping in-progress ids makes it stricter: the dropped ones are required.
	// another snapshot with the same in-progress ids does not cover it.
	other := mustSnap(t, "3999999998:4000001000:"+strings.Join(xip, ","))
	if other.Covers(parsed) {
		t.Errorf("a snapshot with a dropped id in progress covers the shortened token")
	}
	short := SnapshotToken("5:9:6", "")
	if short != "s:5:9:6" {
		t.Errorf("SnapshotToken of a short snapshot = %q", short)
	}
	if SnapshotToken("garbage", "") != "" {
		t.Errorf("SnapshotToken of garbage is not empty")
	}
}

func TestFutureAndSystem(t *testing.T) {
	sn := mustSnap(t, "100:105:101")
	sn.Next = 106 // 105 runs: assigned, not completed
	for _, tc := range []struct {
		token string
		want  bool
	}{{"x:104", false}, {"x:105", false}, {"x:106", true}, {"x:9999", true}, {"s:100:105:", false}, {"s:100:106:", true}} {
		if got := sn.Future(mustToken(t, tc.token)); got != tc.want {
			t.Errorf("Future(%s) = %v, want %v", tc.token, got, tc.want)
		}
	}
	tok := mustToken(t, "x:5@42")
	if err := tok.CheckSystem("42:5:1"); err != nil {
		t.Errorf("same system: %v", err)
	}
	if err := tok.CheckSystem(""); err != nil {
		t.Errorf("unknown source system: %v", err)
	}
	if err := tok.CheckSystem("43:5:1"); !errors.Is(err, ErrTokenRejected) {
		t.Errorf("another system: %v, want ErrTokenRejected", err)
	}
}

// FuzzParseToken holds the parser to its promises: it never panics, a token it takes
// prints back to one it takes again as the same, within MaxTokenBytes.
func FuzzParseToken(f *testing.F) {
	for _, s := range []string{"x:748", "s:748:748:", "s:10:20:12,15@42", "x:5@", "s:1:2:3:4", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseToken(s)
		if err != nil {
			return
		}
		out := tok.String()
		if len(out) > MaxTokenBytes {
			t.Fatalf("%q printed as %d bytes", s, len(out))
		}
		again, err := ParseToken(out)
		if err != nil || again.String() != out {
			t.Fatalf("%q printed as %q, which parses as %v, %v", s, out, again, err)
		}
		if tok.Kind == TokenSnapshot && !tok.Snapshot.Covers(tok) {
			t.Fatalf("snapshot %q does not cover itself", s)
		}
	})
}

// TestNarrow: an x: token below 2^32 against a source whose ids are past it names a
// 32-bit xid whose epoch is lost: refused, never covered. A 64-bit token, or a source
// still in epoch 0, is judged as before.
func TestNarrow(t *testing.T) {
	past := mustSnap(t, "4294968000:4294968010:4294968005")
	for _, tc := range []struct {
		snap  PGSnapshot
		token string
		want  bool
	}{
		{past, "x:725", true}, {past, "x:4294967295", true}, {past, "x:4294967296", false},
		{past, "x:4294968001", false}, {past, "s:725:725:", false}, {mustSnap(t, "700:710:"), "x:705", false},
	} {
		tok := mustToken(t, tc.token)
		if got := tc.snap.Narrow(tok); got != tc.want {
			t.Errorf("%s.Narrow(%s) = %v, want %v", tc.snap, tc.token, got, tc.want)
		}
		if err := tc.snap.NarrowError(tok); (err != nil) != tc.want || (err != nil && !errors.Is(err, ErrTokenRejected)) {
			t.Errorf("%s.NarrowError(%s) = %v", tc.snap, tc.token, err)
		}
	}
}

// A snapshot taken on a hot standby prints no in-progress list: it is known to see
// only what ended below its xmin, its token claims only that, and no token is future
// by it.
func TestRecoverySnapshotJudgedConservatively(t *testing.T) {
	sn, err := takenSnapshot("100:110:", true, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tok  string
		want bool
	}{
		{"x:99", true}, {"x:100", false}, {"x:105", false}, {"x:109", false},
		{"s:90:100:", true}, {"s:90:99:95", true}, {"s:100:101:", false}, {"s:100:110:", false},
	} {
		tok, err := ParseToken(c.tok)
		if err != nil {
			t.Fatal(err)
		}
		if got := sn.Covers(tok); got != c.want {
			t.Errorf("recovery snapshot 100:110: covers %s = %v; want %v", c.tok, got, c.want)
		}
		if sn.Future(tok) {
			t.Errorf("recovery snapshot: %s judged future", c.tok)
		}
	}
	if got := (Position{PgSnapshot: "100:110:", Recovery: true, System: "7:5:1"}).Token(""); got != "s:100:100:@7" {
		t.Errorf("a standby position's token = %q; want s:100:100:@7", got)
	}
	if got := (Position{PgSnapshot: "100:110:105", System: "7:5:1"}).Token(""); got != "s:100:110:105@7" {
		t.Errorf("a primary position's token = %q; want s:100:110:105@7", got)
	}
}

// An x: token is future only at or above the id the source would assign next, not
// at xmax: a running transaction's id may be above every completed one.
func TestFutureByNextXid(t *testing.T) {
	for _, c := range []struct {
		next uint64
		tok  string
		want bool
	}{
		{0, "x:110", false}, {0, "x:500", false}, // next unknown: never future
		{112, "x:110", false}, {112, "x:111", false}, {112, "x:112", true},
		{112, "s:100:111:", true}, {112, "s:100:110:", false},
	} {
		sn, err := takenSnapshot("100:110:", false, c.next)
		if err != nil {
			t.Fatal(err)
		}
		tok, _ := ParseToken(c.tok)
		if got := sn.Future(tok); got != c.want {
			t.Errorf("next %d: Future(%s) = %v; want %v", c.next, c.tok, got, c.want)
		}
	}
}

// An API's snapshot token names the version it was answered from; two versions read
// at the same position tie, and only then does the version tell them apart.
func TestTokenVersionAndTies(t *testing.T) {
	const v1, v2 = Version("00000000-0000-4000-8000-000000000000-1"), Version("00000000-0000-4000-8000-000000000000-2")
	tok := (Position{PgSnapshot: "100:110:105", System: "7:5:1"}).Token(v2)
	if tok != "s:100:110:105@7~"+string(v2) {
		t.Fatalf("token = %q", tok)
	}
	parsed, err := ParseToken(tok)
	if err != nil || parsed.Version != v2 || parsed.System != "7" || parsed.String() != tok {
		t.Fatalf("ParseToken(%q) = %+v, %v", tok, parsed, err)
	}
	for _, bad := range []string{"x:5~" + string(v2), "s:1:2:~nope", "s:1:2:~"} {
		if _, err := ParseToken(bad); !errors.Is(err, ErrTokenRejected) {
			t.Errorf("ParseToken(%q) = %v; want ErrTokenRejected", bad, err)
		}
	}
	same, _ := ParsePGSnapshot("100:110:105")
	later, _ := ParsePGSnapshot("100:111:105")
	switch {
	case !same.Ties(parsed, v1):
		t.Errorf("the same position, another version: no tie")
	case same.Ties(parsed, v2):
		t.Errorf("the same position, the same version: a tie")
	case later.Ties(parsed, v1):
		t.Errorf("a later position: a tie")
	}
}
