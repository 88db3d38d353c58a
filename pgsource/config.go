package pgsource

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"gopkg.in/yaml.v3"
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
	// Key is a key of one column, for callers in Go: the same as KeyColumns{Key}. Set
	// Key or KeyColumns, not both.
	Key string `yaml:"-"`
	// KeyColumns are the column or columns whose values make each document's id (see
	// ID); in YAML `key`, a column name or a list of them. Required for a query; for a
	// table, when neither Key nor KeyColumns is set, the key is inferred when the source
	// is opened: the table's primary key, or else its only unique index over NOT NULL
	// columns.
	KeyColumns Columns `yaml:"key,omitempty"`
	// Indexes are the fields a version indexes for queries by field: each one field
	// (a top-level key of the document: a column of the table, an output name of the
	// query) or several, in order. In YAML, `indexes: [customer_id, [inventory_id,
	// rental_date]]`.
	Indexes []Columns `yaml:"indexes,omitempty"`
}

// Columns names a key's columns, in order. In YAML it is one name (key: id) or a list
// of names (key: [payment_date, payment_id]).
type Columns []string

// UnmarshalYAML accepts a column name or a list of column names.
func (c *Columns) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		var s string
		if err := n.Decode(&s); err != nil {
			return err
		}
		*c = Columns{s}
		return nil
	case yaml.SequenceNode:
		var l []string
		if err := n.Decode(&l); err != nil {
			return err
		}
		*c = l
		return nil
	}
	return errors.New("want a column name or a list of column names")
}

// MarshalYAML writes a key of one column as its name, and a longer one as a list.
func (c Columns) MarshalYAML() (any, error) {
	if len(c) == 1 {
		return c[0], nil
	}
	return []string(c), nil
}

// keyColumns returns the configured key: KeyColumns, or Key; nil when none is set
// (a table's key is then inferred).
func (c Collection) keyColumns() []string {
	if len(c.KeyColumns) > 0 {
		return c.KeyColumns
	}
	if c.Key != "" {
		return []string{c.Key}
	}
	return nil
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
		case c.Key != "" && len(c.KeyColumns) > 0:
			return fmt.Errorf("%s.key (%s): set Key or KeyColumns, not both", field, c.Name)
		case c.KeyColumns != nil && len(c.KeyColumns) == 0:
			return fmt.Errorf("%s.key (%s): an empty list: name the column or columns whose values make each document's id", field, c.Name)
		case c.Table == "" && c.keyColumns() == nil:
			return fmt.Errorf("%s.key (%s): required for a query: the column or columns whose values make each document's id", field, c.Name)
		}
		if c.Query != "" {
			if _, err := subquery(c.Query); err != nil {
				return fmt.Errorf("%s.query (%s): %v", field, c.Name, err)
			}
		}
		key := map[string]bool{}
		for _, col := range c.keyColumns() {
			switch {
			case col == "":
				return fmt.Errorf("%s.key (%s): an empty column name", field, c.Name)
			case key[col]:
				return fmt.Errorf("%s.key (%s): column %q named twice", field, c.Name, col)
			}
			key[col] = true
		}
		if err := validateIndexes(field, c); err != nil {
			return err
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

// fingerprint hashes the collection definitions with their keys (configured or
// inferred), so that a version read with other definitions, or whose ids were made
// from other columns, is never taken for an unchanged source. A key of one column
// hashes as its name alone, so that manifests written before composite keys still match.
func fingerprint(cs []Collection, keys map[string][]string) string {
	h := sha256.New()
	for _, c := range cs {
		h.Write([]byte(definitionLines(c, keys[c.Name])))
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// collectionFingerprints hashes each collection's definition alone, as fingerprint
// hashes them all (snapshot.Position.Configs): a change to one collection's
// definition leaves the others' deltas valid.
func collectionFingerprints(cs []Collection, keys map[string][]string) map[string]string {
	out := make(map[string]string, len(cs))
	for _, c := range cs {
		sum := sha256.Sum256([]byte(definitionLines(c, keys[c.Name])))
		out[c.Name] = hex.EncodeToString(sum[:8])
	}
	return out
}

// definitionLines is what fingerprint hashes of one collection.
func definitionLines(c Collection, key []string) string {
	k := fmt.Sprintf("%q", key)
	if len(key) == 1 {
		k = fmt.Sprintf("%q", key[0])
	}
	s := fmt.Sprintf("%q %q %q %s\n", c.Name, c.Table, c.Query, k)
	if len(c.Indexes) > 0 {
		// A version with other indexes is never taken for an unchanged source;
		// without indexes the hash is what it was before there were any.
		s += fmt.Sprintf("indexes %q\n", c.Indexes)
	}
	return s
}

// rowsSQL is the statement whose rows the collection serves: SELECT * FROM the table,
// or the query.
func (c Collection) rowsSQL() string {
	if c.Table != "" {
		return "SELECT * FROM " + pgx.Identifier(c.tableParts()).Sanitize()
	}
	return c.subquery()
}

// collectionError is an error about one collection: "collection <name>: <err>".
type collectionError struct {
	collection string
	err        error
}

func (e *collectionError) Error() string { return "collection " + e.collection + ": " + e.err.Error() }
func (e *collectionError) Unwrap() error { return e.err }

// inCollection returns err as an error about the collection name.
func inCollection(name string, err error) error { return &collectionError{collection: name, err: err} }

// withoutCollection returns what err says without naming its collection, for a
// report that names it already.
func withoutCollection(err error) string {
	if ce := (*collectionError)(nil); errors.As(err, &ce) {
		return ce.err.Error()
	}
	return err.Error()
}
