package store

import (
	"bytes"
	"strings"
	"testing"

	"github.com/snapflip/snapflip/snapshot"
)

var awkwardIDs = []string{
	"", "a", "a#b", "a/b", "100%", "%2F", "with space", "tab\tx", "nul\x00x", "$", "$$", "#", "##",
	"ünïcødé", "日本語", "emoji 🎉", "a$b", "\x01", "\x24", "\x25", "~", "\xff", "a\x00", "a!", "a#", "a$",
}

func TestEscapeRoundTrip(t *testing.T) {
	for _, id := range awkwardIDs {
		esc := escapeComponent(id)
		if strings.IndexByte(esc, sep) >= 0 {
			t.Errorf("escapeComponent(%q) = %q holds the separator", id, esc)
		}
		got, err := unescapeComponent(esc)
		if err != nil || got != id {
			t.Errorf("unescapeComponent(escapeComponent(%q)) = %q, %v; want the input back", id, got, err)
		}
	}
}

func TestEscapeOrderPreserving(t *testing.T) {
	for _, a := range awkwardIDs {
		for _, b := range awkwardIDs {
			want := strings.Compare(a, b)
			got := strings.Compare(docKey("ds", "v", "c", a), docKey("ds", "v", "c", b))
			if got != want {
				t.Errorf("order of keys for %q, %q = %d; want %d (the ids' own order)", a, b, got, want)
			}
			// A component compared inside a longer key must keep its order too.
			got = strings.Compare(docPrefix("ds", "v", a), docPrefix("ds", "v", b))
			if got != want {
				t.Errorf("order of prefixes for collections %q, %q = %d; want %d", a, b, got, want)
			}
		}
	}
}

func TestUnescapeRejectsMalformed(t *testing.T) {
	for _, s := range []string{"$", "a$", "$\x00", "$z"} {
		if _, err := unescapeComponent(s); err == nil {
			t.Errorf("unescapeComponent(%q) = nil error; want an error", s)
		}
	}
}

func FuzzEscape(f *testing.F) {
	for _, id := range awkwardIDs {
		f.Add(id, "x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ea, eb := escapeComponent(a), escapeComponent(b)
		got, err := unescapeComponent(ea)
		if err != nil || got != a {
			t.Fatalf("round trip of %q = %q, %v", a, got, err)
		}
		if bytes.IndexByte([]byte(ea), sep) >= 0 {
			t.Fatalf("escaped %q holds the separator", a)
		}
		if c1, c2 := strings.Compare(a, b), strings.Compare(ea+"#", eb+"#"); c1 != c2 {
			t.Fatalf("order of %q, %q: ids %d, keys %d", a, b, c1, c2)
		}
	})
}

// TestBatchDocKey: a batch builds the same keys as docKey, and a key it handed out
// stays the same as later keys grow its buffer.
func TestBatchDocKey(t *testing.T) {
	var b batch
	prefix := docPrefix("ds", "v", "c")
	var got, want []string
	for range 50 {
		for _, id := range awkwardIDs {
			got = append(got, b.docKey(prefix, id))
			want = append(want, docKey("ds", "v", "c", id))
		}
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("key %d = %q; want %q", i, got[i], want[i])
		}
	}
}

// DocumentKeyBytes is the length of a real version's document key, escapes included.
func TestDocumentKeyBytes(t *testing.T) {
	v := snapshot.Version("7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1767225600000")
	for _, id := range awkwardIDs {
		if got, want := DocumentKeyBytes("ds#1", "rental/customer_id", id), len(docKey("ds#1", v, "rental/customer_id", id)); got != want {
			t.Errorf("DocumentKeyBytes(%q) = %d; want %d", id, got, want)
		}
	}
}
