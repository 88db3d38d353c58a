package pgsource

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Collection is one named set of documents, filled from a table or a query.
type Collection struct {
	// Name is the collection's name in the API: 1..128 of [A-Za-z0-9_.-], starting
	// with a letter or digit.
	Name string `yaml:"name"`
	// Table is a table or view, "schema.table" or "table", each part exactly as Postgres
	// names it; exclusive with Query. A part that holds a dot or starts with a double
	// quote is written quoted, as SQL quotes identifiers: public."a.b", "my ""x"".y".t.
	Table string `yaml:"table"`
	// Query is a SELECT whose rows are the documents; exclusive with Table.
	Query string `yaml:"query"`
	// Key is the column whose value, as text, is each document's id.
	Key string `yaml:"key"`
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// ValidateCollections reports the first unusable collection definition, naming the
// field as collections[i].field.
func ValidateCollections(cs []Collection) error {
	if len(cs) == 0 {
		return errors.New("collections: at least one collection is required")
	}
	seen := map[string]int{}
	for i, c := range cs {
		field := fmt.Sprintf("collections[%d]", i)
		switch {
		case c.Name == "":
			return fmt.Errorf("%s.name: required", field)
		case !namePattern.MatchString(c.Name):
			return fmt.Errorf("%s.name %q: use 1..128 letters, digits, '_', '.', '-', starting with a letter or digit", field, c.Name)
		case c.Table == "" && strings.TrimSpace(c.Query) == "":
			return fmt.Errorf("%s (%s): set table or query", field, c.Name)
		case c.Table != "" && c.Query != "":
			return fmt.Errorf("%s (%s): set table or query, not both", field, c.Name)
		case c.Key == "":
			return fmt.Errorf("%s.key (%s): required: the column whose value is each document's id", field, c.Name)
		}
		if j, dup := seen[c.Name]; dup {
			return fmt.Errorf("%s.name %q: already used by collections[%d]", field, c.Name, j)
		}
		seen[c.Name] = i
		if c.Table != "" {
			if _, err := splitTable(c.Table); err != nil {
				return fmt.Errorf("%s.table %q: %v: want \"table\" or \"schema.table\" (quote a part that holds a dot: public.\"a.b\")", field, c.Table, err)
			}
		}
	}
	return nil
}

// tableParts returns a validated Table's parts: [schema, table] or [table].
func (c Collection) tableParts() []string {
	parts, _ := splitTable(c.Table)
	return parts
}

// splitTable splits a Table into its one or two parts. A part is bare (no dot, and not
// starting with a double quote; anything else is taken as it is, case included) or a
// quoted identifier ("a.b", with "" for a quote inside it).
func splitTable(s string) ([]string, error) {
	var parts []string
	for {
		var part string
		if strings.HasPrefix(s, `"`) {
			var b strings.Builder
			i := 1
			for {
				j := strings.IndexByte(s[i:], '"')
				if j < 0 {
					return nil, errors.New("a quoted name has no closing quote")
				}
				b.WriteString(s[i : i+j])
				i += j + 1
				if i < len(s) && s[i] == '"' {
					b.WriteByte('"')
					i++
					continue
				}
				break
			}
			part, s = b.String(), s[i:]
			if s != "" && s[0] != '.' {
				return nil, errors.New("a quoted name is followed by something other than a dot")
			}
		} else {
			j := strings.IndexByte(s, '.')
			if j < 0 {
				j = len(s)
			}
			part, s = s[:j], s[j:]
		}
		if part == "" {
			return nil, errors.New("an empty name")
		}
		parts = append(parts, part)
		if s == "" {
			break
		}
		s = s[1:] // the dot
		if s == "" {
			return nil, errors.New("an empty name")
		}
	}
	if len(parts) > 2 {
		return nil, errors.New("more than two names")
	}
	return parts, nil
}

// fingerprint hashes the collection definitions, so that a version read with other
// definitions is never taken for an unchanged source.
func fingerprint(cs []Collection) string {
	h := sha256.New()
	for _, c := range cs {
		fmt.Fprintf(h, "%q %q %q %q\n", c.Name, c.Table, c.Query, c.Key)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
