package gen

import (
	"encoding/hex"
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Type is a column type: its spelling in DDL and how to make a value of it.
type Type struct {
	// SQL is the type as DDL writes it: numeric(12,4), "my enum"[], timestamptz.
	SQL string
	// Kind groups types for coverage reports: base, array, enum, domain, composite, range.
	Kind string
	// Key marks types a collection's key column may have.
	Key bool
	// elem is an array's element type.
	elem *Type
	val  func(g *Gen) string
	// keyVal makes a key value (an id-friendly value); nil means val.
	keyVal func(g *Gen) string
}

// Value returns a SQL expression of the type, never NULL at its top level.
func (t *Type) Value(g *Gen) string { return t.val(g) }

// KeyValue returns a SQL expression for a key of the type: never NULL, and its text
// form is 1..1024 bytes.
func (t *Type) KeyValue(g *Gen) string {
	if t.keyVal != nil {
		return t.keyVal(g)
	}
	return t.val(g)
}

// ValueOrNull is Value, or NULL with probability p, cast to the type.
func (t *Type) ValueOrNull(g *Gen, p float64) string {
	if g.chance(p) {
		return "NULL::" + t.SQL
	}
	return t.val(g)
}

func cast(lit, typ string) string { return Quote(lit) + "::" + typ }

// literal makes a Type from a function returning the value's input text.
func literal(sql string, text func(g *Gen) string) *Type {
	return &Type{SQL: sql, Kind: "base", val: func(g *Gen) string { return cast(text(g), sql) }}
}

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

// baseTypes are Postgres' built-in scalar types, as users declare columns.
func baseTypes() []*Type {
	ts := []*Type{
		literal("boolean", func(g *Gen) string { return pick(g, []string{"true", "false", "t", "no", "on"}) }),
		literal("smallint", func(g *Gen) string { return g.intIn(math.MinInt16, math.MaxInt16) }),
		literal("integer", func(g *Gen) string { return g.intIn(math.MinInt32, math.MaxInt32) }),
		literal("bigint", func(g *Gen) string { return g.intIn(math.MinInt64, math.MaxInt64) }),
		literal("oid", func(g *Gen) string {
			return g.oneOf(0.3, []string{"0", "4294967295", "1"}, func() string { return strconv.FormatUint(uint64(g.r.Uint32()), 10) })
		}),
		literal("numeric", (*Gen).numeric),
		literal("numeric(12,4)", func(g *Gen) string {
			return g.oneOf(0.2, []string{"NaN", "99999999.99994", "-0.00005", "0"}, func() string { return g.decimal(8, 7) })
		}),
		literal("real", (*Gen).float4),
		literal("double precision", (*Gen).float8),
		literal("money", (*Gen).money),
		literal("text", func(g *Gen) string { return g.text(4096) }),
		literal(`"char"`, func(g *Gen) string { return pick(g, []string{"a", "Z", " ", "\\", "'", "ü", "\\303", "\x01", ""}) }),
		literal("character(1)", func(g *Gen) string { return truncRunes(g.text(8), 1) }),
		literal("character(5)", func(g *Gen) string { return truncRunes(g.text(8), 5) }),
		literal("character varying(10)", func(g *Gen) string { return truncRunes(g.text(40), 10) }),
		literal("character varying", func(g *Gen) string { return g.text(200) }),
		literal("name", func(g *Gen) string { return truncateUTF8(g.text(63), 63) }),
		literal("bytea", (*Gen).bytea),
		literal("date", (*Gen).date),
		literal("timestamp without time zone", (*Gen).timestamp),
		// Rounding the greatest timestamp to fewer digits gives a value past the greatest,
		// which Postgres stores but cannot read back from its text: keep clear of it.
		literal("timestamp(3) without time zone", func(g *Gen) string { return belowMax(g.timestamp()) }),
		literal("timestamp with time zone", (*Gen).timestamptz),
		literal("timestamp(0) with time zone", func(g *Gen) string { return belowMax(g.timestamptz()) }),
		literal("time without time zone", (*Gen).timeOfDay),
		literal("time(2) without time zone", (*Gen).timeOfDay),
		literal("time with time zone", (*Gen).timetz),
		literal("interval", (*Gen).interval),
		literal("interval(2)", (*Gen).interval),
		literal("uuid", (*Gen).uuid),
		literal("json", func(g *Gen) string { return g.jsonText(3) }),
		literal("jsonb", func(g *Gen) string { return g.jsonText(3) }),
		literal("inet", (*Gen).inet),
		literal("cidr", (*Gen).cidr),
		literal("macaddr", func(g *Gen) string { return g.mac(6) }),
		literal("macaddr8", func(g *Gen) string { return g.mac(pick(g, []int{6, 8, 8})) }),
		literal("bit(1)", func(g *Gen) string { return g.bits(1) }),
		literal("bit(12)", func(g *Gen) string { return g.bits(12) }),
		literal("bit varying(20)", func(g *Gen) string { return g.bits(g.intn(21)) }),
		literal("bit varying", func(g *Gen) string { return g.bits(g.intn(100)) }),
		literal("point", func(g *Gen) string {
			if g.chance(0.1) {
				return pick(g, []string{"(NaN,1)", "(Infinity,-Infinity)", "(NaN,NaN)"})
			}
			return g.pt()
		}),
		literal("line", func(g *Gen) string {
			return g.oneOf(0.2, []string{"{1,0,0}", "{0,-1,5}", "[(0,0),(1,1)]"}, func() string {
				return "{" + g.plainFloat() + ",1," + g.plainFloat() + "}"
			})
		}),
		literal("lseg", func(g *Gen) string { return "[" + g.pts(2, 2) + "]" }),
		literal("box", func(g *Gen) string { return g.pts(2, 2) }),
		literal("path", func(g *Gen) string {
			if g.chance(0.5) {
				return "[" + g.pts(1, 5) + "]"
			}
			return "(" + g.pts(1, 5) + ")"
		}),
		literal("polygon", func(g *Gen) string { return "(" + g.pts(1, 6) + ")" }),
		literal("circle", func(g *Gen) string {
			return "<" + g.pt() + "," + strings.TrimPrefix(g.plainFloat(), "-") + ">"
		}),
		literal("tsvector", (*Gen).tsvector),
		literal("tsquery", func(g *Gen) string { return g.tsquery(3) }),
		literal("xml", (*Gen).xml),
		literal("pg_lsn", func(g *Gen) string {
			return g.oneOf(0.3, []string{"0/0", "FFFFFFFF/FFFFFFFF", "16/B374D848"},
				func() string { return fmt.Sprintf("%X/%X", g.r.Uint32(), g.r.Uint32()) })
		}),
	}
	return append(ts, rangeTypes()...)
}

func truncRunes(s string, n int) string {
	r := []rune(s)
	if len(r) > n {
		r = r[:n]
	}
	return strings.TrimRight(string(r), " ")
}

// bound is a range bound: its SQL expression, and a number to order bounds by.
type bound struct {
	sql string
	ord *big.Rat
}

// rangeOf returns a range type whose bounds come from b (an unordered pair is
// sorted); 'empty' and unbounded ends come up too.
func rangeOf(sql, ctor string, b func(g *Gen) bound) *Type {
	return &Type{SQL: sql, Kind: "range", val: func(g *Gen) string {
		if g.chance(0.1) {
			return cast("empty", sql)
		}
		lo, hi := b(g), b(g)
		if lo.ord.Cmp(hi.ord) > 0 {
			lo, hi = hi, lo
		}
		if g.chance(0.15) {
			lo.sql = "NULL"
		}
		if g.chance(0.15) {
			hi.sql = "NULL"
		}
		return fmt.Sprintf("%s(%s, %s, %s)", ctor, lo.sql, hi.sql, Quote(pick(g, []string{"[)", "[]", "(]", "()"})))
	}}
}

func ratOf(s string) *big.Rat {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		panic("gen: not a number: " + s)
	}
	return r
}

func timeBound(g *Gen, typ string, format func(time.Time) string, inf float64) bound {
	switch {
	case g.chance(inf):
		return bound{cast("-infinity", typ), big.NewRat(math.MinInt64, 1)}
	case g.chance(inf):
		return bound{cast("infinity", typ), big.NewRat(math.MaxInt64, 1)}
	}
	t := g.instant()
	t = t.Truncate(time.Microsecond)
	if typ == "date" {
		t = time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	}
	return bound{cast(format(t), typ), big.NewRat(t.UnixMicro(), 1)}
}

func rangeTypes() []*Type {
	intBound := func(bits int) func(g *Gen) bound {
		return func(g *Gen) bound {
			lo, hi, typ := int64(math.MinInt32), int64(math.MaxInt32-1), "integer"
			if bits == 64 {
				lo, hi, typ = math.MinInt64, math.MaxInt64-1, "bigint"
			}
			s := g.intIn(lo, hi)
			return bound{cast(s, typ), ratOf(s)}
		}
	}
	numBound := func(g *Gen) bound {
		switch {
		case g.chance(0.1):
			return bound{cast("-Infinity", "numeric"), big.NewRat(-1<<62, 1)}
		case g.chance(0.1):
			return bound{cast("Infinity", "numeric"), big.NewRat(1<<62, 1)}
		}
		s := g.decimal(15, 10)
		return bound{cast(s, "numeric"), ratOf(s)}
	}
	return []*Type{
		rangeOf("int4range", "int4range", intBound(32)),
		rangeOf("int8range", "int8range", intBound(64)),
		rangeOf("numrange", "numrange", numBound),
		rangeOf("tsrange", "tsrange", func(g *Gen) bound { return timeBound(g, "timestamp", pgTimestamp, 0.1) }),
		rangeOf("tstzrange", "tstzrange", func(g *Gen) bound {
			return timeBound(g, "timestamptz", pgTimestamptzUTC, 0.1)
		}),
		rangeOf("daterange", "daterange", func(g *Gen) bound { return timeBound(g, "date", pgDate, 0.1) }),
		multirangeOf("int4multirange", "int4range", intBound(32)),
		multirangeOf("nummultirange", "numrange", numBound),
		multirangeOf("tstzmultirange", "tstzrange", func(g *Gen) bound {
			return timeBound(g, "timestamptz", pgTimestamptzUTC, 0.05)
		}),
	}
}

func multirangeOf(sql, rangeSQL string, b func(g *Gen) bound) *Type {
	r := rangeOf(rangeSQL, rangeSQL, b)
	return &Type{SQL: sql, Kind: "range", val: func(g *Gen) string {
		parts := make([]string, g.intn(4))
		for i := range parts {
			parts[i] = r.val(g)
		}
		return sql + "(" + strings.Join(parts, ", ") + ")"
	}}
}

// arrayOf returns the array type of elem: one to three dimensions (rectangular), NULL
// elements, empty arrays, and for plain types non-default lower bounds.
func arrayOf(elem *Type) *Type {
	t := &Type{SQL: elem.SQL + "[]", Kind: "array", elem: elem}
	t.val = func(g *Gen) string {
		if g.chance(0.1) {
			return cast("{}", t.SQL)
		}
		dims := []int{g.between(1, 4)}
		for len(dims) < 3 && g.chance(0.3) {
			dims = append(dims, g.between(1, 3))
		}
		var build func(d int) string
		build = func(d int) string {
			items := make([]string, dims[d])
			for i := range items {
				if d+1 < len(dims) {
					items[i] = build(d + 1)
				} else {
					items[i] = elem.ValueOrNull(g, 0.15)
				}
			}
			return "ARRAY[" + strings.Join(items, ",") + "]"
		}
		s := build(0) + "::" + t.SQL
		if elem.SQL == "integer" && len(dims) == 1 && g.chance(0.3) {
			// Bounds other than 1: to_json ignores them, and so must the copy.
			lo := g.between(-3, 3)
			s = fmt.Sprintf("array_fill(7, ARRAY[%d], ARRAY[%d])", dims[0], lo)
		}
		return s
	}
	return t
}

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
