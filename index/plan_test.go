package index

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/snapflip/snapflip/snapshot"
)

func conds(tb testing.TB, kv ...string) []Cond {
	tb.Helper()
	var cs []Cond
	for i := 0; i < len(kv); i += 2 {
		c, err := ParseCond(kv[i], kv[i+1])
		if err != nil {
			tb.Fatal(err)
		}
		cs = append(cs, c)
	}
	return cs
}

func enc(tb testing.TB, typ Type, text string) []byte {
	tb.Helper()
	b, err := EncodeText(typ, text)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestPlan(t *testing.T) {
	a := NewDef([]string{"a"}, []Type{TypeNumber})
	ab := NewDef([]string{"a", "b"}, []Type{TypeNumber, TypeText})
	ba := NewDef([]string{"b", "a"}, []Type{TypeText, TypeNumber})
	defs := []Def{ab, a, ba}
	one, two := enc(t, TypeNumber, "1"), enc(t, TypeNumber, "2")
	x, y := enc(t, TypeText, "x"), enc(t, TypeText, "y")
	null := []byte{tagNull}
	tests := []struct {
		name  string
		conds []Cond
		want  Scan
	}{
		{"eq picks the shortest index", conds(t, "a", "eq.1.0"), Scan{a, []Range{{one, successor(one)}}}},
		{"in sorts and dedupes", conds(t, "a", "in.(2,1,1.00)"), Scan{a, []Range{{one, successor(one)}, {two, successor(two)}}}},
		{"is.null", conds(t, "a", "is.null"), Scan{a, []Range{{null, nil}}}},
		{"gt stops before null", conds(t, "a", "gt.1"), Scan{a, []Range{{successor(one), null}}}},
		{"lte starts at the first value", conds(t, "a", "lte.1"), Scan{a, []Range{{nil, successor(one)}}}},
		{"two bounds", conds(t, "a", "gte.1", "a", "lt.2"), Scan{a, []Range{{one, two}}}},
		{"empty bounds", conds(t, "a", "gt.2", "a", "lt.1"), Scan{a, nil}},
		{"prefix and range", conds(t, "b", "gt.x", "a", "eq.1"), Scan{ab, []Range{{cat(one, successor(x)), cat(one, null)}}}},
		{"product", conds(t, "a", "in.(2,1)", "b", "in.(y,x)"), Scan{ab, []Range{
			{cat(one, x), successor(cat(one, x))}, {cat(one, y), successor(cat(one, y))},
			{cat(two, x), successor(cat(two, x))}, {cat(two, y), successor(cat(two, y))},
		}}},
		{"range on the second field of another index", conds(t, "b", "is.null", "a", "lt.2"), Scan{ba, []Range{{null, cat(null, two)}}}},
	}
	for _, tt := range tests {
		got, err := Plan(defs, tt.conds)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}

func TestPlanRefuses(t *testing.T) {
	defs := []Def{NewDef([]string{"a", "b"}, []Type{TypeNumber, TypeDate}), NewDef([]string{"c"}, []Type{TypeBool})}
	for _, tt := range []struct {
		name   string
		conds  []Cond
		noIdx  bool
		phrase string
	}{
		{"no condition", nil, false, "needs a condition"},
		{"no value", []Cond{{Field: "a", Op: OpGt}}, false, "0 values for gt"},
		{"no op", []Cond{{Field: "a", Values: []string{"1"}}}, false, "unknown operator"},
		{"value for is.null", []Cond{{Field: "a", Op: OpIsNull, Values: []string{"1"}}}, false, "1 values for is"},
		{"unindexed field", conds(t, "z", "eq.1"), true, "z=eq.1"},
		{"range before equality", conds(t, "a", "gt.1", "b", "eq.2020-01-01"), true, "(a,b), (c)"},
		{"skips a field", conds(t, "b", "eq.2020-01-01"), true, "(a,b)"},
		{"two equalities", conds(t, "a", "eq.1", "a", "eq.2"), true, "two conditions"},
		{"two lower bounds", conds(t, "a", "gt.1", "a", "gte.2"), true, "two conditions"},
		{"equality and range", conds(t, "a", "eq.1", "a", "gt.2"), true, "both"},
		{"ranges on two fields", conds(t, "a", "gt.1", "c", "gt.true"), true, "two fields"},
		{"two indexes", conds(t, "a", "eq.1", "c", "eq.true"), true, "a=eq.1&c=eq.true"},
		{"bad number", conds(t, "a", "eq.x1"), false, `"x1" is not a number`},
		{"bad date", conds(t, "a", "eq.1", "b", "lt.2020-13-01"), false, "b"},
		{"bad bool", conds(t, "c", "in.(true,yes)"), false, "yes"},
		{"too many ranges", conds(t, "a", "in.("+numbers(100)+")", "b", "in.(2020-01-01,2020-01-02,2020-01-03,2020-01-04,2020-01-05,2020-01-06,2020-01-07,2020-01-08,2020-01-09,2020-01-10,2020-01-11)"), false, "ranges"},
	} {
		_, err := Plan(defs, tt.conds)
		if !errors.Is(err, snapshot.ErrInvalid) || errors.Is(err, ErrNoIndex) != tt.noIdx || !strings.Contains(err.Error(), tt.phrase) {
			t.Errorf("%s: %v; want an error wrapping ErrInvalid (ErrNoIndex: %t) saying %q", tt.name, err, tt.noIdx, tt.phrase)
		}
	}
}

// numbers returns "1,2,…,n".
func numbers(n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = strconv.Itoa(i + 1)
	}
	return strings.Join(s, ",")
}

func TestDefValidate(t *testing.T) {
	if err := NewDef([]string{"a", "b"}, []Type{TypeText, TypeDate}).Validate(); err != nil {
		t.Errorf("a valid index: %v", err)
	}
	for _, d := range []Def{
		NewDef(nil, nil),
		NewDef([]string{"a"}, nil),
		NewDef([]string{"a", "a"}, []Type{TypeText, TypeText}),
		NewDef([]string{""}, []Type{TypeText}),
		NewDef([]string{"a"}, []Type{0}),
		{Name: "b", Fields: []string{"a"}, Types: []Type{TypeText}},
	} {
		if err := d.Validate(); !errors.Is(err, snapshot.ErrInvalid) {
			t.Errorf("%+v: Validate() = %v; want ErrInvalid", d, err)
		}
	}
}

// FuzzPlan plans whatever ParseCond accepts: no panic, an error wraps ErrInvalid, and
// the ranges are sorted and disjoint.
func FuzzPlan(f *testing.F) {
	f.Add("a", "in.(1,2)", "b", "gt.x")
	f.Add("b", "is.null", "c", "lte.2020-01-01T00:00:00Z")
	f.Fuzz(func(t *testing.T, f1, e1, f2, e2 string) {
		defs := []Def{
			NewDef([]string{"a", "b"}, []Type{TypeNumber, TypeText}),
			NewDef([]string{"b", "c"}, []Type{TypeText, TypeTimestampTZ}),
			NewDef([]string{"c", "a", "d"}, []Type{TypeTimestampTZ, TypeNumber, TypeBool}),
		}
		var cs []Cond
		for _, fe := range [][2]string{{f1, e1}, {f2, e2}} {
			if c, err := ParseCond(fe[0], fe[1]); err == nil {
				cs = append(cs, c)
			}
		}
		scan, err := Plan(defs, cs)
		if err != nil {
			if !errors.Is(err, snapshot.ErrInvalid) {
				t.Fatalf("Plan(%v): %v; want ErrInvalid", cs, err)
			}
			return
		}
		for i, r := range scan.Ranges {
			if r.End != nil && bytes.Compare(r.Start, r.End) >= 0 {
				t.Fatalf("Plan(%v): empty range %x", cs, r)
			}
			if i > 0 && (scan.Ranges[i-1].End == nil || bytes.Compare(scan.Ranges[i-1].End, r.Start) > 0) {
				t.Fatalf("Plan(%v): ranges %x overlap", cs, scan.Ranges)
			}
		}
	})
}
