// Package configtest holds every configuration of snapflip to one rule: a zero field
// takes its default, so that a config's zero value, given its defaults, is the
// package's Default, and a field that can be turned off has a switch of its own
// (a negative duration, a flag), never its zero value.
package configtest

import (
	"reflect"
	"testing"
)

// Case is one config: its zero value given its defaults (withDefaults), and the
// package's Default.
type Case struct {
	Name          string
	Zero, Default any
	// Kept names the fields whose zero value has a meaning of its own, kept because
	// a public API promised it, with that meaning.
	Kept map[string]string
}

// Check fails t for each case whose zero value with its defaults is not its Default,
// naming the fields that differ.
func Check(t *testing.T, cases ...Case) {
	t.Helper()
	for _, c := range cases {
		z, d := reflect.ValueOf(c.Zero), reflect.ValueOf(c.Default)
		if z.Type() != d.Type() {
			t.Errorf("%s: zero value of %s, Default of %s", c.Name, z.Type(), d.Type())
			continue
		}
		for i := range z.NumField() {
			f := z.Type().Field(i)
			if _, kept := c.Kept[f.Name]; kept || !f.IsExported() {
				continue
			}
			if a, b := z.Field(i).Interface(), d.Field(i).Interface(); !reflect.DeepEqual(a, b) {
				t.Errorf("%s.%s: the zero value takes %v, the Default is %v", c.Name, f.Name, a, b)
			}
		}
	}
}
