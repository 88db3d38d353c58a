package index

import "strings"

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
