// Package gen generates random Postgres schemas, rows and histories as SQL text for
// the generative differential test in e2e, where Postgres itself is the oracle of what
// the API must serve. It knows nothing of snapflip beyond the collection config: it
// makes statements, and the test runs them. Everything is a pure function of the seed,
// so a seed replays the same schema and history.
package gen

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"unicode/utf8"
)

// Gen is a seeded generator. It is not safe for concurrent use.
type Gen struct {
	r *rand.Rand
}

// New returns a generator whose every choice follows from seed.
func New(seed uint64) *Gen {
	return &Gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

func (g *Gen) intn(n int) int { return g.r.IntN(n) }

// between returns a number in [lo, hi].
func (g *Gen) between(lo, hi int) int { return lo + g.r.IntN(hi-lo+1) }

func (g *Gen) chance(p float64) bool { return g.r.Float64() < p }

func pick[T any](g *Gen, xs []T) T { return xs[g.r.IntN(len(xs))] }

// Quote returns s as a standard SQL string literal (standard_conforming_strings is on,
// so a backslash stands for itself).
func Quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Ident returns s as a quoted SQL identifier.
func Ident(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// maxIdentBytes is Postgres' NAMEDATALEN-1: a longer identifier is silently truncated.
const maxIdentBytes = 63

// hostileIdents break naive SQL generation: keywords; one-letter names (t is the alias
// pgsource gives a collection's row, x the oracle's); names the syncer's own SQL uses
// (pgsource's selectSQL and tableFingerprint: count, sum, hashtext, xmin's friends,
// attname, relkind, to_json, text); mixed case; spaces; quotes; dots; separators of
// URLs, row keys and config; non-ASCII; the 63-byte limit.
var hostileIdents = []string{
	"t", "T", "x", "X", "a", "k", "id", "key", "value", "doc", "row", "rows",
	"select", "from", "where", "order", "group", "by", "table", "user", "limit", "offset",
	"desc", "asc", "null", "true", "false", "column", "check", "default", "primary", "all",
	"end", "type", "values", "as", "on", "and", "not", "case", "when", "union", "analyse",
	"count", "sum", "hashtext", "hashint8extended", "attname", "attrelid", "attnum",
	"relkind", "to_json", "to_jsonb", "text", "numeric", "coalesce", "string_agg", "part",
	"Mixed Case", "CamelCase", "UPPER", "lower", "with space", " lead", "trail ", "  ",
	`quote"d`, `"`, "it's", "'", `back\slash`, "a.b", ".", "..", "a.", ".b", "public.t",
	"ünïcødé", "日本語", "emoji 🎉", "ß", "İ", "Ω", "$1", "$", "#", "%", "%25", "a;b", "--",
	"/*", "*/", "?", "&", "a/b", "{}", "[0]", "(x)", "tab\there", "new\nline", "*",
	strings.Repeat("n", maxIdentBytes), strings.Repeat("é", maxIdentBytes/2),
}

// systemColumns cannot name a table's column.
var systemColumns = map[string]bool{"tableoid": true, "xmin": true, "cmin": true, "xmax": true, "cmax": true, "ctid": true}

// names hands out identifiers unique within one namespace (exact comparison, as
// Postgres compares quoted identifiers).
type names map[string]bool

// ident returns a hostile identifier not in used (nor in avoid), and marks it used.
func (g *Gen) ident(used names, avoid ...names) string {
	taken := func(s string) bool {
		if used[s] || systemColumns[s] {
			return true
		}
		for _, a := range avoid {
			if a[s] {
				return true
			}
		}
		return false
	}
	for try := 0; ; try++ {
		var s string
		switch {
		case try < 4 && g.chance(0.8):
			s = pick(g, hostileIdents)
		case g.chance(0.5):
			s = pick(g, hostileIdents) + pick(g, []string{"_", " ", ".", "-", "\"", "'", ""}) + pick(g, hostileIdents)
		default:
			s = g.str(g.between(1, 20), false)
		}
		if try >= 4 {
			s = fmt.Sprintf("%s%d", s, try)
		}
		s = truncateUTF8(s, maxIdentBytes)
		if s == "" || strings.ContainsRune(s, 0) || taken(s) {
			continue
		}
		used[s] = true
		return s
	}
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// runeClasses are what random strings are made of: ASCII, every character that needs
// escaping somewhere (SQL, JSON, URLs, row keys, YAML), control characters, combining
// marks, characters JSON encoders treat specially, and 2-, 3- and 4-byte UTF-8.
var runeClasses = [][]rune{
	[]rune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"),
	[]rune(" !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
	{'\t', '\n', '\r', 0x01, 0x1f, 0x7f, 0x08, 0x0c},
	[]rune("éüßñÅøæçİıΩЖ\u0301\u0308"),
	{'\u2028', '\u2029', '\ufeff', '\ufffd', '\uffff', '\u200d', '\u202e', '<', '>', '&'},
	[]rune("日本語中文한국어"),
	{'🎉', '😀', '👩', '🏽', '𝕏', '\U0010ffff'},
}

// str returns a random string of up to n runes; with ascii, from the first class only.
func (g *Gen) str(n int, ascii bool) string {
	var b strings.Builder
	for range g.intn(n + 1) {
		cls := runeClasses[0]
		if !ascii && g.chance(0.5) {
			cls = pick(g, runeClasses)
		}
		b.WriteRune(pick(g, cls))
	}
	return b.String()
}

// hostileStrings are text values worth trying in every text column.
var hostileStrings = []string{
	"", " ", "  trailing  ", "NULL", "null", "true", "0", "-0", "1e400", "NaN", "\\x00ff", "\\",
	`{"a":1}`, "[1,2]", "'; DROP TABLE x; --", "%", "%2F", "#", "/", "..", "a/b#c%d?e=f&g",
	"emoji 🎉 👩‍👩‍👧", "é", "e\u0301", "\u2028\u2029", "tab\tnew\nline\r", "\x01\x1f\x7f",
	"<script>&amp;</script>", "ünïcødé 日本語", "\U0010ffff", "\ufeffbom",
}

// text returns a random text value of at most max bytes.
func (g *Gen) text(max int) string {
	var s string
	switch {
	case g.chance(0.3):
		s = pick(g, hostileStrings)
	case g.chance(0.05):
		s = strings.Repeat(g.str(8, false)+"x", g.between(100, 600))
	default:
		s = g.str(g.between(1, 40), g.chance(0.3))
	}
	return truncateUTF8(s, max)
}
