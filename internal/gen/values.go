package gen

import (
	"encoding/hex"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Values of the base types: each function returns the input text of a random value,
// specials (NaN, infinities, extremes, odd spellings) at a fixed rate.

// oneOf returns specials with probability p, else the result of random.
func (g *Gen) oneOf(p float64, specials []string, random func() string) string {
	if g.chance(p) {
		return pick(g, specials)
	}
	return random()
}

// digits returns n random digits, the first not 0 when n > 1.
func (g *Gen) digits(n int) string {
	b := []byte(g.rawDigits(n))
	if n > 1 && b[0] == '0' {
		b[0] = byte('1' + g.intn(9))
	}
	return string(b)
}

func (g *Gen) rawDigits(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('0' + g.intn(10))
	}
	return string(b)
}

// decimal returns a decimal with up to maxInt integer and maxFrac fraction digits
// (trailing zeros included: numeric keeps its scale).
func (g *Gen) decimal(maxInt, maxFrac int) string {
	s := g.digits(g.between(1, maxInt))
	if f := g.intn(maxFrac + 1); f > 0 {
		s += "." + g.rawDigits(f)
	}
	if g.chance(0.4) {
		s = "-" + s
	}
	return s
}

func (g *Gen) intIn(lo, hi int64) string {
	specials := []string{"0", "-1", "1", strconv.FormatInt(lo, 10), strconv.FormatInt(hi, 10),
		strconv.FormatInt(lo+1, 10), strconv.FormatInt(hi-1, 10)}
	return g.oneOf(0.35, specials, func() string {
		bits := g.between(1, 63)
		v := g.r.Int64() >> (63 - bits)
		if g.chance(0.5) {
			v = -v
		}
		return strconv.FormatInt(max(lo, min(hi, v)), 10)
	})
}

func (g *Gen) numeric() string {
	return g.oneOf(0.25, []string{"NaN", "Infinity", "-Infinity", "0", "-0", "0.000", "1.50", "-0.0000001",
		"1e-30", "123456789012345678901234567890.123456789012345678901234567890", "9007199254740993",
		"99999999999999999999999999999999999999999999999999999999999999999999999999999999"},
		func() string { return g.decimal(g.size(12, 60), g.size(8, 40)) })
}

// size returns small usually and large rarely.
func (g *Gen) size(small, large int) int {
	if g.chance(0.1) {
		return large
	}
	return small
}

func (g *Gen) float8() string {
	return g.oneOf(0.3, []string{"NaN", "Infinity", "-Infinity", "-0", "0", "1.7976931348623157e308",
		"-1.7976931348623157e308", "5e-324", "2.2250738585072014e-308", "9007199254740993", "0.1", "1e23", "-1e-7"},
		func() string {
			if g.chance(0.3) {
				f := math.Float64frombits(g.r.Uint64())
				if !math.IsNaN(f) && !math.IsInf(f, 0) {
					return strconv.FormatFloat(f, 'g', -1, 64)
				}
			}
			return strconv.FormatFloat(g.r.NormFloat64()*math.Pow(10, float64(g.between(-20, 20))), 'g', -1, 64)
		})
}

func (g *Gen) float4() string {
	return g.oneOf(0.3, []string{"NaN", "Infinity", "-Infinity", "-0", "0", "3.4028235e38", "-3.4028235e38",
		"1e-45", "1.1754944e-38", "16777217", "0.1"},
		func() string {
			if g.chance(0.3) {
				f := math.Float32frombits(g.r.Uint32())
				if !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0) {
					return strconv.FormatFloat(float64(f), 'g', -1, 32)
				}
			}
			return strconv.FormatFloat(float64(float32(g.r.NormFloat64()*math.Pow(10, float64(g.between(-10, 10))))), 'g', -1, 32)
		})
}

// plainFloat is a finite float for geometry, where specials make invalid shapes.
func (g *Gen) plainFloat() string {
	return g.oneOf(0.2, []string{"0", "-0", "1e300", "-1e-300", "0.1", "123456.789"},
		func() string { return strconv.FormatFloat(g.r.NormFloat64()*100, 'g', g.between(1, 17), 64) })
}

func (g *Gen) money() string {
	return g.oneOf(0.3, []string{"0", "-92233720368547758.08", "92233720368547758.07", "0.01", "-0.01"},
		func() string { return g.decimal(12, 2) })
}

// instant returns a random moment, mostly near today, sometimes anywhere Postgres can
// hold.
func (g *Gen) instant() time.Time {
	switch g.intn(6) {
	case 0:
		return time.UnixMicro(int64(g.r.Uint64N(uint64(8000*365*24*3600*1e6)))).AddDate(-4000, 0, 0).UTC()
	case 1:
		return time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(g.between(-3, 3)) * time.Microsecond)
	default:
		return time.UnixMicro(int64(g.r.Uint64N(uint64(200*365*24*3600*1e6))) - 100*365*24*3600*1e6).UTC()
	}
}

// pgDate formats a date the way Postgres reads it, BC years included.
func pgDate(t time.Time) string {
	y := t.Year()
	if y <= 0 {
		return fmt.Sprintf("%04d-%02d-%02d BC", 1-y, t.Month(), t.Day())
	}
	return fmt.Sprintf("%04d-%02d-%02d", y, t.Month(), t.Day())
}

func pgTimestamp(t time.Time) string {
	d, bc := pgDate(t), ""
	if strings.HasSuffix(d, " BC") {
		d, bc = strings.TrimSuffix(d, " BC"), " BC"
	}
	return fmt.Sprintf("%s %02d:%02d:%02d.%06d%s", d, t.Hour(), t.Minute(), t.Second(), t.Nanosecond()/1000, bc)
}

// pgTimestamptzUTC formats a moment as a timestamptz in UTC.
func pgTimestamptzUTC(t time.Time) string {
	s := pgTimestamp(t)
	if strings.HasSuffix(s, " BC") {
		return strings.TrimSuffix(s, " BC") + "+00 BC"
	}
	return s + "+00"
}

func (g *Gen) date() string {
	return g.oneOf(0.25, []string{"infinity", "-infinity", "4714-11-24 BC", "5874897-12-31", "2000-02-29",
		"1970-01-01", "0001-01-01", "0001-12-31 BC", "1582-10-10", "9999-12-31"},
		func() string { return pgDate(g.instant()) })
}

func (g *Gen) timestamp() string {
	return g.oneOf(0.2, []string{"infinity", "-infinity", "4714-11-24 00:00:00 BC", "294276-12-31 23:59:59.999999",
		"2000-02-29 23:59:59.999999", "1970-01-01 00:00:00", "epoch", "2038-01-19 03:14:08"},
		func() string { return pgTimestamp(g.instant()) })
}

var zones = []string{"+00", "Z", "-00:30", "+05:45", "+14", "-12", "+15:59:59", "-15:59", " America/New_York",
	" Europe/Berlin", " Asia/Kolkata", " UTC", " Australia/Lord_Howe", " Pacific/Kiritimati"}

func (g *Gen) timestamptz() string {
	return g.oneOf(0.2, []string{"infinity", "-infinity", "4714-11-24 00:00:00+00 BC", "294276-12-31 23:59:59.999999+00",
		"2024-03-10 02:30:00 America/New_York", "2024-10-27 02:30:00 Europe/Berlin", "1970-01-01 00:00:00+00", "epoch"},
		func() string {
			s := pgTimestamp(g.instant())
			if strings.HasSuffix(s, " BC") {
				return strings.TrimSuffix(s, " BC") + "+00 BC"
			}
			return s + pick(g, zones)
		})
}

func belowMax(ts string) string { return strings.Replace(ts, "23:59:59.999999", "23:59:58", 1) }

func (g *Gen) clock() string {
	return fmt.Sprintf("%02d:%02d:%02d.%06d", g.intn(24), g.intn(60), g.intn(60), g.intn(1e6))
}

func (g *Gen) timeOfDay() string {
	return g.oneOf(0.25, []string{"00:00:00", "24:00:00", "23:59:59.999999", "12:00", "allballs"}, g.clock)
}

func (g *Gen) timetz() string {
	return g.oneOf(0.25, []string{"00:00:00+15:59:59", "24:00:00-15:59:59", "23:59:59.999999+00", "12:00-05:30"},
		func() string { return g.clock() + pick(g, zones[:7]) })
}

func (g *Gen) interval() string {
	return g.oneOf(0.25, []string{"0", "-178000000 years", "178000000 years", "2147483647 days", "-2147483648 days",
		"2562047788:00:54.775807", "-2562047788:00:54.775807", "1 mon -30 days", "P1Y2M3DT4H5M6.5S", "@ 1 minute ago",
		"1.5 years", "0.000001 seconds"},
		func() string {
			var parts []string
			for _, u := range []string{"years", "mons", "days", "hours", "minutes"} {
				if g.chance(0.5) {
					parts = append(parts, fmt.Sprintf("%d %s", g.between(-10000, 10000), u))
				}
			}
			if g.chance(0.5) {
				parts = append(parts, g.decimal(6, 6)+" seconds")
			}
			if len(parts) == 0 {
				return "0"
			}
			return strings.Join(parts, " ")
		})
}

func (g *Gen) uuid() string {
	return g.oneOf(0.1, []string{"00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
		"{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}", "A0EEBC999C0B4EF8BB6D6BB9BD380A11"},
		func() string {
			b := make([]byte, 16)
			for i := range b {
				b[i] = byte(g.intn(256))
			}
			h := hex.EncodeToString(b)
			return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
		})
}

func (g *Gen) bytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.intn(256))
	}
	return b
}

func (g *Gen) bytea() string {
	n := g.intn(40)
	if g.chance(0.05) {
		n = g.between(1000, 5000)
	}
	return `\x` + hex.EncodeToString(g.bytes(n))
}

// jsonNumbers are spellings JSON allows and jsonb normalizes.
var jsonNumbers = []string{"0", "-0", "1.0E+2", "1e300", "-1.5e-7", "12345678901234567890123456789",
	"0.1", "3.141592653589793238462643383279", "1E-5", "-0.0", "100e-2", "9007199254740993", "1.50"}

// jsonString escapes s as a JSON string, choosing among the escapes JSON allows.
func (g *Gen) jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '/' && g.chance(0.5):
			b.WriteString(`\/`)
		case r == '\n' && g.chance(0.5):
			b.WriteString(`\n`)
		case r < 0x20:
			fmt.Fprintf(&b, `\u%04x`, r)
		case r > 0xffff && g.chance(0.5):
			r -= 0x10000
			fmt.Fprintf(&b, `\u%04X\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		case r > 0x7f && r <= 0xffff && g.chance(0.3):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// jsonText returns a random JSON text; objects may repeat a key (json keeps both,
// jsonb the last).
func (g *Gen) jsonText(depth int) string {
	ws := func() string { return pick(g, []string{"", "", " ", "\n", "\t ", "  "}) }
	switch k := g.intn(8); {
	case depth > 0 && k < 2:
		n := g.intn(4)
		items := make([]string, n)
		for i := range items {
			items[i] = ws() + g.jsonText(depth-1) + ws()
		}
		return "[" + strings.Join(items, ",") + "]"
	case depth > 0 && k < 5:
		n := g.intn(5)
		var keys []string
		items := make([]string, n)
		for i := range items {
			key := g.text(20)
			if len(keys) > 0 && g.chance(0.25) {
				key = pick(g, keys)
			}
			keys = append(keys, key)
			items[i] = ws() + g.jsonString(key) + ws() + ":" + ws() + g.jsonText(depth-1) + ws()
		}
		return "{" + strings.Join(items, ",") + "}"
	case k == 5:
		return g.oneOf(0.5, jsonNumbers, func() string { return g.decimal(20, 20) })
	case k == 6:
		return pick(g, []string{"true", "false", "null"})
	default:
		return g.jsonString(g.text(60))
	}
}

func (g *Gen) ipv4() netip.Addr {
	var b [4]byte
	copy(b[:], g.bytes(4))
	return netip.AddrFrom4(b)
}

func (g *Gen) ipAddr() netip.Addr {
	switch g.intn(4) {
	case 0:
		var b [16]byte
		copy(b[:], g.bytes(16))
		return netip.AddrFrom16(b)
	case 1:
		return netip.AddrFrom16(g.ipv4().As16()) // ::ffff:a.b.c.d
	default:
		return g.ipv4()
	}
}

func (g *Gen) inet() string {
	a := g.ipAddr()
	if g.chance(0.5) {
		return a.String()
	}
	return fmt.Sprintf("%s/%d", a, g.intn(a.BitLen()+1))
}

func (g *Gen) cidr() string {
	a := g.ipAddr()
	p, _ := a.Prefix(g.intn(a.BitLen() + 1))
	return p.String()
}

func (g *Gen) mac(n int) string {
	h := hex.EncodeToString(g.bytes(n))
	switch g.intn(3) {
	case 0:
		return h
	case 1:
		return strings.ToUpper(h)
	}
	var parts []string
	for i := 0; i < len(h); i += 2 {
		parts = append(parts, h[i:i+2])
	}
	return strings.Join(parts, pick(g, []string{":", "-"}))
}

func (g *Gen) bits(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('0' + g.intn(2))
	}
	return string(b)
}

func (g *Gen) pt() string { return "(" + g.plainFloat() + "," + g.plainFloat() + ")" }

func (g *Gen) pts(lo, hi int) string {
	n := g.between(lo, hi)
	ps := make([]string, n)
	for i := range ps {
		ps[i] = g.pt()
	}
	return strings.Join(ps, ",")
}

// lexemes are tsvector and tsquery words, some needing quotes and escapes.
var lexemes = []string{"fat", "rat", "cat", "a", "it's", `back\slash`, "ünï", "日本", "with space", "&", "!", ":", "🎉", "x:1"}

func tsQuote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", "''") + "'"
}

func (g *Gen) tsvector() string {
	var ws []string
	for range g.intn(6) {
		w := tsQuote(pick(g, lexemes))
		if g.chance(0.5) {
			var ps []string
			for range g.between(1, 3) {
				ps = append(ps, strconv.Itoa(g.between(1, 16383))+pick(g, []string{"", "A", "B", "C", "D"}))
			}
			w += ":" + strings.Join(ps, ",")
		}
		ws = append(ws, w)
	}
	return strings.Join(ws, " ")
}

func (g *Gen) tsquery(depth int) string {
	if depth == 0 || g.chance(0.4) {
		w := tsQuote(pick(g, lexemes))
		return w + pick(g, []string{"", "", ":*", ":AB", ":*C"})
	}
	if g.chance(0.2) {
		return "!" + g.tsquery(depth-1)
	}
	op := pick(g, []string{" & ", " | ", " <-> ", " <2> "})
	return "(" + g.tsquery(depth-1) + op + g.tsquery(depth-1) + ")"
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "\r", "&#13;").Replace(s)
}

func (g *Gen) xml() string {
	text := func() string {
		// XML forbids most control characters.
		return xmlEscape(strings.Map(func(r rune) rune {
			if r < 0x20 && r != '\t' && r != '\n' || r == 0x7f || r == 0xfffe || r == 0xffff {
				return -1
			}
			return r
		}, g.text(40)))
	}
	return g.oneOf(0.3, []string{"<a/>", `<?xml version="1.0"?><r/>`, "plain text", "<![CDATA[<x>&]]>", "<!-- c --><a>1</a>",
		`<a xmlns:p="urn:p"><p:b p:c="d"/></a>`, "", "a<b>c</b>d"},
		func() string {
			return fmt.Sprintf(`<r a="%s">%s<c>%s</c></r>%s`, text(), text(), text(), text())
		})
}
