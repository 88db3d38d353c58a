package gen

import (
	"fmt"
	"math"
	"math/big"
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
