package api

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/snapflip/snapflip/snapshot"
)

// FuzzPageToken: any string given as a page token either decodes or is refused as a
// bad request (never a panic), and a token that decodes survives re-encoding.
func FuzzPageToken(f *testing.F) {
	for _, s := range []string{"", "e30", "!!", "eyJ2IjoxfQ", encodeCursor(pageCursor{Version: "v", Collection: "c", After: "a"}),
		encodeCursor(map[string]any{"v": []int{1}}), "bnVsbA", "W10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var tok pageCursor
		if err := decodePageCursor(s, &tok); err != nil {
			if !errors.Is(err, snapshot.ErrInvalid) {
				t.Fatalf("decodeToken(%q) = %v; want a bad-request error", s, err)
			}
			return
		}
		var again pageCursor
		if err := decodePageCursor(encodeCursor(tok), &again); err != nil || again != tok {
			t.Fatalf("token %+v re-encoded decodes to %+v, %v", tok, again, err)
		}
	})
}

// FuzzPageTokenRoundTrip: every token the server can hand out (an id up to MaxIDBytes,
// a collection name up to 128 bytes, any bytes in them) decodes to what it encoded.
func FuzzPageTokenRoundTrip(f *testing.F) {
	f.Add("7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1763737200000", "items", "a/b#c")
	f.Add("v", "c", "<<<<>>>&&&\x00\x01\u2028")
	// The longest token: every byte of a longest id escaped by JSON to six bytes.
	f.Add("7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1763737200000", strings.Repeat("<", 128), strings.Repeat("\x01", MaxIDBytes))
	f.Fuzz(func(t *testing.T, v, c, after string) {
		if len(after) > MaxIDBytes || len(c) > 128 || len(v) > 128 ||
			!utf8.ValidString(v) || !utf8.ValidString(c) || !utf8.ValidString(after) {
			return // not a token the server makes: ids and names are UTF-8 and bounded
		}
		tok := pageCursor{Version: snapshot.Version(v), Collection: c, After: after}
		var got pageCursor
		if err := decodePageCursor(encodeCursor(tok), &got); err != nil || got != tok {
			t.Fatalf("token %+v decodes to %+v, %v", tok, got, err)
		}
	})
}
