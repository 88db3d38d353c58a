package gen

import (
	"math"
	"strings"
)

// MaxIDBytes is the longest id a document may have (pgsource.MaxIDBytes).
const MaxIDBytes = 1024

// hostileKeys are ids that need escaping in URLs, row keys, JSON or page tokens, or
// that sort next to each other in tricky ways (a row key escapes bytes <= '$').
var hostileKeys = []string{"#", "/", "%", "%2F", "%25", "%zz", "%%", " ", "  ", "a b", "..", ".", "../..",
	"a/../b", "//", "a//b", "emoji 🎉", "trail ", " lead", "?", "&", "a?b=c&d", "+", "~", "$", "$$", "$@",
	"a", "A", "aa", "a#", "a$", "a!", "a\x01", "a$A", "a#b", "a\x7f", "\x01", "\t", "\n", "\r\n", "é", "e\u0301",
	"\u00ff\u0100", "\U0010ffff", "\ufeff", ";", "a;b", "\\", `"`, "'", "null", "NaN", "-0", "0", ":batchGet",
	"x:batchGet", "*", "/v1/data", "v1", "<>", "\u2028"}

// keyText returns a text key: 1..MaxIDBytes bytes, never empty.
func (g *Gen) keyText() string {
	var s string
	switch {
	case g.chance(0.35):
		s = pick(g, hostileKeys)
	case g.chance(0.06):
		// Up to and exactly at the limit, ending in a multi-byte character.
		n := pick(g, []int{MaxIDBytes, MaxIDBytes, MaxIDBytes - 1, g.between(100, MaxIDBytes)})
		var b strings.Builder
		for b.Len() < n {
			r := pick(g, pick(g, runeClasses))
			if b.Len()+len(string(r)) > n {
				r = 'L'
			}
			b.WriteRune(r)
		}
		s = b.String()
	default:
		s = g.text(60)
	}
	s = truncateUTF8(s, MaxIDBytes)
	if s == "" {
		s = "empty"
	}
	return s
}

// keyTypes are the types a key column may have, each with key values whose text form
// is a valid id. Text comes up most.
func keyTypes() []*Type {
	key := func(sql string, kv func(g *Gen) string) *Type {
		return &Type{SQL: sql, Kind: "base", Key: true, val: func(g *Gen) string { return cast(kv(g), sql) }}
	}
	text := key("text", (*Gen).keyText)
	return []*Type{text, text, text, text,
		key("integer", func(g *Gen) string { return g.intIn(math.MinInt32, math.MaxInt32) }),
		key("bigint", func(g *Gen) string { return g.intIn(math.MinInt64, math.MaxInt64) }),
		key("smallint", func(g *Gen) string { return g.intIn(math.MinInt16, math.MaxInt16) }),
		key("numeric", func(g *Gen) string {
			return g.oneOf(0.3, []string{"NaN", "Infinity", "-Infinity", "0", "-0", "1.50", "1.5", "0.0001", "-1e-20", "1e30"},
				func() string { return g.decimal(g.size(6, 200), g.size(4, 200)) })
		}),
		key("uuid", (*Gen).uuid),
		key("timestamp with time zone", (*Gen).timestamptz),
		key("date", (*Gen).date),
	}
}
