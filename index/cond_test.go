package index

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/snapflip/snapflip/snapshot"
)

func TestParseCond(t *testing.T) {
	tests := []struct {
		expr string
		want Cond
	}{
		{"eq.1", Cond{"f", OpEq, []string{"1"}}},
		{"eq.1.1", Cond{"f", OpEq, []string{"1.1"}}},
		{"eq.", Cond{"f", OpEq, []string{""}}},
		{"gt.2020-01-01T00:00:00Z", Cond{"f", OpGt, []string{"2020-01-01T00:00:00Z"}}},
		{"gte.a", Cond{"f", OpGte, []string{"a"}}},
		{"lt.-1", Cond{"f", OpLt, []string{"-1"}}},
		{"lte.x(y)", Cond{"f", OpLte, []string{"x(y)"}}},
		{"is.null", Cond{"f", OpIsNull, nil}},
		{"in.(a)", Cond{"f", OpIn, []string{"a"}}},
		{`in.(a,b,"c,d")`, Cond{"f", OpIn, []string{"a", "b", "c,d"}}},
		{`in.("(x)","a\"b\\c","")`, Cond{"f", OpIn, []string{"(x)", `a"b\c`, ""}}},
		{"in.( a ,b)", Cond{"f", OpIn, []string{" a ", "b"}}},
		{"in.(" + strings.Repeat("1,", MaxIn-1) + "1)", Cond{"f", OpIn, strings.Split(strings.Repeat("1,", MaxIn-1)+"1", ",")}},
	}
	for _, tt := range tests {
		got, err := ParseCond("f", tt.expr)
		if err != nil {
			t.Errorf("ParseCond(f, %q): %v", tt.expr, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ParseCond(f, %q) (-want +got):\n%s", tt.expr, diff)
		}
		if again, err := ParseCond("f", strings.TrimPrefix(got.String(), "f=")); err != nil || !cmp.Equal(again, got) {
			t.Errorf("ParseCond of String() %q = %v, %v; want %v", got.String(), again, err, got)
		}
	}
}

func TestParseCondRefuses(t *testing.T) {
	huge := "in.(" + strings.Repeat("1,", 9999) + "1)"
	for _, tt := range []struct{ field, expr, want string }{
		{"f", "eq", "want op.value"},
		{"f", "like.a", "unknown operator"},
		{"f", "is.true", "is takes only null"},
		{"f", "in.()", "empty"},
		{"f", "in.a,b", "parenthesised"},
		{"f", "in.(a,,b)", "empty"},
		{"f", "in.(a,)", "empty"},
		{"f", `in.("a)`, "unterminated"},
		{"f", `in.("a"b)`, "comma"},
		{"f", `in.(a"b)`, "quote it"},
		{"f", "in.(a(b)", "quote it"},
		{"f", huge, "more than 100"},
		{"f", "eq.a\x00", "NUL"},
		{"f", "eq.\xff", "UTF-8"},
		{"f\x00", "eq.1", "NUL"},
		{"", "eq.1", "empty"},
	} {
		_, err := ParseCond(tt.field, tt.expr)
		if !errors.Is(err, snapshot.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseCond(%q, %.40q) = %v; want an error wrapping ErrInvalid saying %q", tt.field, tt.expr, err, tt.want)
		}
		if err != nil && len(err.Error()) > 400 {
			t.Errorf("ParseCond(%q, %.40q): error of %d bytes; want the input truncated", tt.field, tt.expr, len(err.Error()))
		}
	}
}

func FuzzParseCond(f *testing.F) {
	for _, s := range []string{"eq.1", `in.(a,"b,c",d)`, "is.null", "gte.2020-01-01", `in.("\"")`, "in.()"} {
		f.Add("f", s)
	}
	f.Fuzz(func(t *testing.T, field, expr string) {
		c, err := ParseCond(field, expr)
		if err != nil {
			if !errors.Is(err, snapshot.ErrInvalid) || !utf8.ValidString(err.Error()) {
				t.Fatalf("ParseCond(%q, %q): %v; want an error wrapping ErrInvalid, in UTF-8", field, expr, err)
			}
			return
		}
		if c.Field != field || (c.Op == OpIn && (len(c.Values) == 0 || len(c.Values) > MaxIn)) {
			t.Fatalf("ParseCond(%q, %q) = %+v", field, expr, c)
		}
		again, err := ParseCond(field, strings.TrimPrefix(c.String(), field+"="))
		if err != nil || !cmp.Equal(again, c) {
			t.Fatalf("ParseCond(%q, %q) = %+v; its String %q parses as %+v, %v", field, expr, c, c.String(), again, err)
		}
	})
}
