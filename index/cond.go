package index

import (
	"bytes"
	"strings"
	"unicode/utf8"
)

// Op is a filter's operator.
type Op int

// The operators of PostgREST's grammar that an index serves.
const (
	OpEq     Op = iota + 1 // eq.v
	OpIn                   // in.(a,b,"c,d")
	OpGt                   // gt.v
	OpGte                  // gte.v
	OpLt                   // lt.v
	OpLte                  // lte.v
	OpIsNull               // is.null
)

var opNames = [...]string{OpEq: "eq", OpIn: "in", OpGt: "gt", OpGte: "gte", OpLt: "lt", OpLte: "lte", OpIsNull: "is"}

// String returns the operator as the grammar writes it ("is" for OpIsNull).
func (o Op) String() string {
	if o <= 0 || int(o) >= len(opNames) {
		return "Op(?)"
	}
	return opNames[o]
}

// MaxIn is the most values an in list may hold.
const MaxIn = 100

// Cond is one filter condition: Field Op Values. Values holds one value for eq, gt,
// gte, lt and lte, one or more for in, none for is.null; each as typed, unencoded.
type Cond struct {
	Field  string
	Op     Op
	Values []string
}

// String returns the condition as a query parameter would write it.
func (c Cond) String() string {
	switch c.Op {
	case OpIsNull:
		return c.Field + "=is.null"
	case OpIn:
		q := make([]string, len(c.Values))
		for i, v := range c.Values {
			q[i] = quoteIn(v)
		}
		return c.Field + "=in.(" + strings.Join(q, ",") + ")"
	}
	v := ""
	if len(c.Values) > 0 {
		v = c.Values[0]
	}
	return c.Field + "=" + c.Op.String() + "." + v
}

// check reports a condition ParseCond would not return: an unknown operator, or a
// number of values other than its operator takes.
func (c Cond) check() error {
	n := len(c.Values)
	switch {
	case c.Op <= 0 || int(c.Op) >= len(opNames):
		return errInvalid("filter on %s: unknown operator %d", show(c.Field), int(c.Op))
	case c.Op == OpIsNull && n != 0,
		c.Op == OpIn && (n == 0 || n > MaxIn),
		c.Op != OpIsNull && c.Op != OpIn && n != 1:
		return errInvalid("filter on %s: %d values for %s", show(c.Field), n, c.Op)
	}
	return nil
}

func quoteIn(v string) string {
	if v != "" && !strings.ContainsAny(v, `,()"\`) {
		return v
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
}

// ParseCond parses a filter's expression for field, as PostgREST writes it:
// op.value, where the value is everything after the first dot (eq.1.1 is 1.1);
// in.(a,b,"c,d"), whose double-quoted items may hold commas, parentheses and
// backslash escapes, with 1 to MaxIn items; is.null. An error names the field and the
// input and wraps snapshot.ErrInvalid; NUL and invalid UTF-8 are errors.
func ParseCond(field, expr string) (Cond, error) {
	c, why := parseCond(field, expr)
	if why != "" {
		return Cond{}, errInvalid("filter %s=%s: %s", show(field), show(expr), why)
	}
	return c, nil
}

func parseCond(field, expr string) (Cond, string) {
	switch {
	case field == "":
		return Cond{}, "the field name is empty"
	case !utf8.ValidString(field) || !utf8.ValidString(expr):
		return Cond{}, "invalid UTF-8"
	case strings.IndexByte(field, 0) >= 0 || strings.IndexByte(expr, 0) >= 0:
		return Cond{}, "NUL is not allowed"
	}
	name, val, ok := strings.Cut(expr, ".")
	if !ok {
		return Cond{}, "want op.value, with op one of eq, in, gt, gte, lt, lte, is"
	}
	c := Cond{Field: field}
	switch name {
	case "eq":
		c.Op = OpEq
	case "gt":
		c.Op = OpGt
	case "gte":
		c.Op = OpGte
	case "lt":
		c.Op = OpLt
	case "lte":
		c.Op = OpLte
	case "is":
		if val != "null" {
			return Cond{}, "is takes only null"
		}
		c.Op = OpIsNull
		return c, ""
	case "in":
		c.Op = OpIn
		vals, why := parseIn(val)
		c.Values = vals
		return c, why
	default:
		return Cond{}, "unknown operator " + `"` + truncate(name) + `"` + ": want eq, in, gt, gte, lt, lte or is"
	}
	c.Values = []string{val}
	return c, ""
}

// parseIn parses "(a,b,"c,d")" into its items.
func parseIn(s string) ([]string, string) {
	if len(s) < 2 || s[0] != '(' || s[len(s)-1] != ')' {
		return nil, "in wants a parenthesised list: in.(a,b)"
	}
	s = s[1 : len(s)-1]
	if s == "" {
		return nil, "the in list is empty"
	}
	var vals []string
	for {
		if len(vals) == MaxIn {
			return nil, "the in list holds more than 100 values"
		}
		v, rest, why := inItem(s)
		if why != "" {
			return nil, why
		}
		vals = append(vals, v)
		if rest == "" {
			return vals, ""
		}
		s = rest[1:] // rest starts with the comma inItem stopped at
	}
}

// inItem reads one item of an in list: a quoted string, or anything up to a comma
// without quotes or parentheses. It returns the item and what follows it, which is
// empty or starts with a comma.
func inItem(s string) (string, string, string) {
	if s == "" || s[0] == ',' {
		return "", "", `an unquoted item of an in list is empty (write "" for the empty string)`
	}
	if s[0] != '"' {
		i := strings.IndexAny(s, `,()"`)
		if i < 0 {
			return s, "", ""
		}
		if s[i] != ',' {
			return "", "", "an unquoted item of an in list holds " + string(s[i]) + " (quote it)"
		}
		return s[:i], s[i:], ""
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if i+1 == len(s) {
				return "", "", "unterminated quote in the in list"
			}
			i++
			b.WriteByte(s[i])
		case '"':
			rest := s[i+1:]
			if rest != "" && rest[0] != ',' {
				return "", "", "want a comma after a quoted item of the in list"
			}
			return b.String(), rest, ""
		default:
			b.WriteByte(s[i])
		}
	}
	return "", "", "unterminated quote in the in list"
}

// Holds reports whether a value of type t, encoded as Encode encodes it, satisfies
// the condition as a scan of an index on its field finds it: NULL satisfies is.null
// alone, never a range. The error names a condition value that is not a t.
func (c Cond) Holds(t Type, enc []byte) (bool, error) {
	if err := c.check(); err != nil {
		return false, err
	}
	null := len(enc) == 1 && enc[0] == tagNull
	if c.Op == OpIsNull || null {
		return c.Op == OpIsNull && null, nil
	}
	for _, v := range c.Values {
		e, err := encodeCond(t, c, v)
		if err != nil {
			return false, err
		}
		cmp := bytes.Compare(enc, e)
		switch c.Op {
		case OpEq, OpIn:
			if cmp == 0 {
				return true, nil
			}
		case OpGt:
			return cmp > 0, nil
		case OpGte:
			return cmp >= 0, nil
		case OpLt:
			return cmp < 0, nil
		case OpLte:
			return cmp <= 0, nil
		}
	}
	return false, nil
}
