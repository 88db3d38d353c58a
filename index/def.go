package index

import (
	"slices"
	"strings"
)

// Def is a declared index: the fields it orders by, in order, and their types.
type Def struct {
	Name   string // the fields joined by ","
	Fields []string
	Types  []Type
}

// NewDef returns the index on fields with their types, named by them.
func NewDef(fields []string, types []Type) Def {
	return Def{Name: strings.Join(fields, ","), Fields: fields, Types: types}
}

// Validate reports, wrapping snapshot.ErrInvalid, an index a manifest or a
// configuration should not hold: no fields, an empty or repeated field, a type per
// field missing or unknown, or a Name other than the fields joined by ",".
func (d Def) Validate() error {
	if len(d.Fields) == 0 {
		return errInvalid("index %s has no fields", show(d.Name))
	}
	if len(d.Types) != len(d.Fields) {
		return errInvalid("index %s has %d fields and %d types", show(d.Name), len(d.Fields), len(d.Types))
	}
	for i, f := range d.Fields {
		if f == "" || slices.Contains(d.Fields[:i], f) {
			return errInvalid("index %s: field %q is empty or repeated", show(d.Name), f)
		}
		if !d.Types[i].valid() {
			return errInvalid("index %s: field %s has no type", show(d.Name), show(f))
		}
	}
	if want := strings.Join(d.Fields, ","); d.Name != want {
		return errInvalid("index %s: want the name %s", show(d.Name), show(want))
	}
	return nil
}
