package pgsource

import (
	"errors"
	"strings"
)

// subquery returns a query collection's text as it goes inside the subquery a scan
// wraps it in: without the ';' that ends a query pasted from psql, nor the comments and
// blanks around it, which would be a syntax error there. It reads the text as Postgres
// does — strings ('…', E'…' with backslash escapes), quoted identifiers, dollar
// quoting, line and nested block comments — so a ';' inside any of them is text, not
// the end, and it refuses a text holding more than one statement.
func subquery(q string) (string, error) {
	end, semi := -1, -1 // end of the last token; the first top-level ';'
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
			continue
		case strings.HasPrefix(q[i:], "--"):
			if n := strings.IndexByte(q[i:], '\n'); n >= 0 {
				i += n + 1
			} else {
				i = len(q)
			}
			continue
		case strings.HasPrefix(q[i:], "/*"):
			n, err := blockComment(q[i:])
			if err != nil {
				return "", err
			}
			i += n
			continue
		}
		if c == ';' { // empty statements after it are fine, as in psql
			if semi < 0 {
				semi = i
			}
			i++
			continue
		}
		if semi >= 0 {
			return "", errors.New("holds more than one statement: a query collection is one SELECT")
		}
		switch {
		case c == '\'':
			escapes := i > 0 && (q[i-1] == 'E' || q[i-1] == 'e') && (i == 1 || !identChar(q[i-2]))
			n, err := quoted(q[i:], '\'', escapes)
			if err != nil {
				return "", err
			}
			i += n
		case c == '"':
			n, err := quoted(q[i:], '"', false)
			if err != nil {
				return "", err
			}
			i += n
		case c == '$' && (i == 0 || !identChar(q[i-1])):
			if tag, ok := dollarTag(q[i:]); ok {
				n := strings.Index(q[i+len(tag):], tag)
				if n < 0 {
					return "", errors.New("a dollar-quoted string " + tag + " is not closed")
				}
				i += len(tag) + n + len(tag)
			} else {
				i++
			}
		default:
			i++
		}
		end = i
	}
	if end < 0 {
		return "", errors.New("is empty")
	}
	return strings.TrimSpace(q[:end]), nil
}

// blockComment returns the length of the comment s starts with; block comments nest.
func blockComment(s string) (int, error) {
	depth := 0
	for i := 0; i+1 < len(s); {
		switch s[i : i+2] {
		case "/*":
			depth++
			i += 2
		case "*/":
			depth--
			i += 2
			if depth == 0 {
				return i, nil
			}
		default:
			i++
		}
	}
	return 0, errors.New("a /* comment is not closed")
}

// quoted returns the length of the quoted text s starts with (s[0] is q); a doubled q
// is one q, and with escapes a backslash escapes the next byte.
func quoted(s string, q byte, escapes bool) (int, error) {
	for i := 1; i < len(s); i++ {
		switch {
		case escapes && s[i] == '\\':
			i++
		case s[i] == q && i+1 < len(s) && s[i+1] == q:
			i++
		case s[i] == q:
			return i + 1, nil
		}
	}
	if q == '"' {
		return 0, errors.New("a quoted identifier is not closed")
	}
	return 0, errors.New("a string is not closed")
}

// dollarTag returns the $tag$ that s starts with, if it starts with one.
func dollarTag(s string) (string, bool) {
	for i := 1; i < len(s); i++ {
		switch {
		case s[i] == '$':
			return s[:i+1], true
		case !identChar(s[i]) || (i == 1 && s[i] >= '0' && s[i] <= '9'):
			return "", false
		}
	}
	return "", false
}

func identChar(c byte) bool {
	return c == '_' || c >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

// subquery is the collection's query as a scan wraps it; ValidateCollections has
// refused one that does not read as a single statement.
func (c Collection) subquery() string {
	q, err := subquery(c.Query)
	if err != nil {
		return c.Query // the scan fails with Postgres' own message
	}
	return q
}
