package pgsource

import (
	"strings"
	"testing"
)

func TestSubquery(t *testing.T) {
	for _, tt := range []struct{ in, want, err string }{
		{in: "SELECT 1", want: "SELECT 1"},
		{in: "  SELECT 1 ;  \n", want: "SELECT 1"},
		{in: "SELECT k, v FROM h; -- the end", want: "SELECT k, v FROM h"},
		{in: "SELECT k, v FROM h;\n-- done\n", want: "SELECT k, v FROM h"},
		{in: "SELECT k FROM h; /* c /* nested */ still */ ;", want: "SELECT k FROM h"},
		{in: "SELECT 1 -- trailing", want: "SELECT 1"},
		{in: "-- leading\nSELECT 1", want: "-- leading\nSELECT 1"},
		{in: "SELECT ';' AS k", want: "SELECT ';' AS k"},
		{in: "SELECT 'it''s;' AS k;", want: "SELECT 'it''s;' AS k"},
		{in: `SELECT E'\';' AS k;`, want: `SELECT E'\';' AS k`},
		{in: `SELECT 'a\' AS k; -- standard strings: \ is text`, want: `SELECT 'a\' AS k`},
		{in: `SELECT 1 AS ";";`, want: `SELECT 1 AS ";"`},
		{in: "SELECT $$;$$ AS k; ", want: "SELECT $$;$$ AS k"},
		{in: "SELECT $x$ $$; $x$ AS k;", want: "SELECT $x$ $$; $x$ AS k"},
		{in: "SELECT a$b FROM t;", want: "SELECT a$b FROM t"},
		{in: "SELECT 1; SELECT 2", err: "more than one statement"},
		{in: "SELECT 1;;", want: "SELECT 1"},
		{in: "; -- nothing", err: "empty"},
		{in: "-- only a comment", err: "empty"},
		{in: "SELECT 'open", err: "not closed"},
		{in: "SELECT /* open", err: "not closed"},
		{in: "SELECT $q$ open", err: "not closed"},
	} {
		got, err := subquery(tt.in)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("subquery(%q) = %q, %v; want an error saying %q", tt.in, got, err, tt.err)
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("subquery(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}
