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
	// Table is a table or view, "schema.table" or "table"; exclusive with Query.
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
			parts := strings.Split(c.Table, ".")
			if len(parts) > 2 || slicesContainsEmpty(parts) {
				return fmt.Errorf("%s.table %q: want \"table\" or \"schema.table\"", field, c.Table)
			}
		}
	}
	return nil
}

func slicesContainsEmpty(ss []string) bool {
	for _, s := range ss {
		if s == "" {
			return true
		}
	}
	return false
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
