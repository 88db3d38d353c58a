package index

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/snapflip/snapflip/snapshot"
)

// Range is a span of encoded values components (Key's output, without the id): a key K
// is in it when Start <= K < End, an empty Start meaning the index's first entry and a
// nil End leaving it unbounded above. The encodings
// are self-delimiting, so K followed by any suffix (the id) is in it exactly when K is:
// a scan from Start to End over full row keys under one index prefix returns exactly
// the entries whose values are in the range.
type Range struct {
	Start, End []byte
}

// Scan is how a filter is served: the ranges of one index, sorted by Start, disjoint,
// together holding exactly the entries whose documents match every condition.
type Scan struct {
	Index  Def
	Ranges []Range
}

// MaxRanges bounds the ranges of one scan: the product of the sizes of its in lists.
const MaxRanges = 1000

// ErrNoIndex reports a filter that no declared index serves: equality on a prefix of
// an index's fields and at most one range on the next. Plan's errors that wrap it
// also wrap snapshot.ErrInvalid.
var ErrNoIndex = errors.New("no index serves the filter")

// fieldConds are the conditions on one field: at most one equality (eq, in or
// is.null) and at most a lower and an upper bound.
type fieldConds struct {
	eq, lower, upper *Cond
}

// Plan returns the scan that serves conds, all of which must hold: on the index with
// the fewest fields (the first declared among equals) that has equality conditions on
// a prefix of its fields and at most one range (a lower bound, an upper bound or
// both) on the next. A filter of another shape is an error wrapping ErrNoIndex that
// names the conditions and the indexes; a value the field's type cannot hold is an
// error wrapping snapshot.ErrInvalid that names the field, the value and the type.
// gt, gte, lt and lte never match NULL; is.null matches only NULL.
func Plan(defs []Def, conds []Cond) (Scan, error) {
	if len(conds) == 0 {
		return Scan{}, errInvalid("a filter needs a condition")
	}
	for _, c := range conds {
		if err := c.check(); err != nil {
			return Scan{}, err
		}
	}
	byField, order, why := group(conds)
	if why == "" {
		why = "an index serves equality (eq, in, is.null) on a prefix of its fields and at most one range (gt, gte, lt, lte) on the next"
		if f := unindexed(defs, order); f != "" {
			why = "no index has the field " + show(f)
		}
		for _, d := range byLength(defs) {
			if serves(d, byField, order) {
				return plan(d, byField)
			}
		}
	}
	return Scan{}, noIndex(defs, conds, why)
}

// unindexed returns the first of fields that no index has, or "".
func unindexed(defs []Def, fields []string) string {
	for _, f := range fields {
		if !slices.ContainsFunc(defs, func(d Def) bool { return slices.Contains(d.Fields, f) }) {
			return f
		}
	}
	return ""
}

func noIndex(defs []Def, conds []Cond, why string) error {
	cs := make([]string, len(conds))
	for i, c := range conds {
		cs[i] = c.String()
	}
	names := make([]string, len(defs))
	for i, d := range defs {
		names[i] = "(" + d.Name + ")"
	}
	list := "there are none"
	if len(defs) > 0 {
		list = "the indexes are " + strings.Join(names, ", ")
	}
	return fmt.Errorf("filter %s: %w (%s; %s): %w", truncateList(strings.Join(cs, "&")), ErrNoIndex, why, list, snapshot.ErrInvalid)
}

func truncateList(s string) string {
	if len(s) <= 200 {
		return s
	}
	return s[:200] + "…"
}

// group sorts conds by field, in the order fields first appear, or says why they
// cannot be served by any index.
func group(conds []Cond) (map[string]*fieldConds, []string, string) {
	byField := map[string]*fieldConds{}
	var order []string
	ranges := 0
	for i := range conds {
		c := &conds[i]
		fc := byField[c.Field]
		if fc == nil {
			fc = &fieldConds{}
			byField[c.Field] = fc
			order = append(order, c.Field)
		}
		slot := &fc.eq
		switch c.Op {
		case OpGt, OpGte:
			slot = &fc.lower
		case OpLt, OpLte:
			slot = &fc.upper
		case OpEq, OpIn, OpIsNull:
		default:
			return nil, nil, fmt.Sprintf("unknown operator %d on %s", int(c.Op), c.Field)
		}
		if *slot != nil {
			return nil, nil, "two conditions of one kind on " + c.Field
		}
		*slot = c
		if fc.eq != nil && (fc.lower != nil || fc.upper != nil) {
			return nil, nil, "both an equality and a range on " + c.Field
		}
	}
	for _, fc := range byField {
		if fc.eq == nil {
			ranges++
		}
	}
	if ranges > 1 {
		return nil, nil, "ranges on two fields (an index serves a range on one)"
	}
	return byField, order, ""
}

// byLength returns defs stably sorted by their number of fields.
func byLength(defs []Def) []Def {
	s := slices.Clone(defs)
	slices.SortStableFunc(s, func(a, b Def) int { return len(a.Fields) - len(b.Fields) })
	return s
}

// serves reports whether d's first fields are exactly the equality fields, followed
// by the range field if there is one.
func serves(d Def, byField map[string]*fieldConds, fields []string) bool {
	if len(d.Fields) < len(fields) || len(d.Types) != len(d.Fields) {
		return false
	}
	for i, f := range d.Fields[:len(fields)] {
		fc := byField[f]
		if fc == nil || slices.Index(d.Fields[:i], f) >= 0 {
			return false
		}
		if fc.eq == nil && i != len(fields)-1 {
			return false
		}
	}
	return true
}

// plan builds the ranges of d for the grouped conditions.
func plan(d Def, byField map[string]*fieldConds) (Scan, error) {
	prefixes := [][]byte{nil}
	i := 0
	for ; i < len(d.Fields); i++ {
		fc := byField[d.Fields[i]]
		if fc == nil || fc.eq == nil {
			break
		}
		encs, err := encodeEq(d.Types[i], *fc.eq)
		if err != nil {
			return Scan{}, err
		}
		if len(prefixes)*len(encs) > MaxRanges {
			return Scan{}, errInvalid("filter on index %s: the in lists make more than %d ranges", d.Name, MaxRanges)
		}
		prefixes = product(prefixes, encs)
	}
	var fc *fieldConds
	if i < len(d.Fields) {
		fc = byField[d.Fields[i]]
	}
	scan := Scan{Index: d}
	for _, p := range prefixes {
		r := Range{Start: p, End: successor(p)}
		if fc != nil {
			var err error
			if r, err = bounds(d.Types[i], p, fc); err != nil {
				return Scan{}, err
			}
		}
		if r.End == nil || bytes.Compare(r.Start, r.End) < 0 {
			scan.Ranges = append(scan.Ranges, r)
		}
	}
	slices.SortFunc(scan.Ranges, func(a, b Range) int { return bytes.Compare(a.Start, b.Start) })
	return scan, nil
}

// encodeEq returns the distinct encodings an equality condition allows.
func encodeEq(t Type, c Cond) ([][]byte, error) {
	if c.Op == OpIsNull {
		return [][]byte{{tagNull}}, nil
	}
	var encs [][]byte
	for _, v := range c.Values {
		e, err := encodeCond(t, c, v)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(encs, func(x []byte) bool { return bytes.Equal(x, e) }) {
			encs = append(encs, e)
		}
	}
	return encs, nil
}

func encodeCond(t Type, c Cond, v string) ([]byte, error) {
	e, err := EncodeText(t, v)
	if err != nil {
		return nil, fmt.Errorf("filter %s, field %s: %w", truncate(c.String()), c.Field, err)
	}
	return e, nil
}

// product returns every prefix followed by every encoding.
func product(prefixes, encs [][]byte) [][]byte {
	out := make([][]byte, 0, len(prefixes)*len(encs))
	for _, p := range prefixes {
		for _, e := range encs {
			out = append(out, append(slices.Clip(p), e...))
		}
	}
	return out
}

// bounds returns the range of keys after prefix p whose next field satisfies fc's
// bounds: from the lower bound (the field's first value when there is none) up to
// the upper bound, or else up to NULL, which a range never includes.
func bounds(t Type, p []byte, fc *fieldConds) (Range, error) {
	r := Range{Start: p, End: append(slices.Clip(p), tagNull)}
	if c := fc.lower; c != nil {
		e, err := encodeCond(t, *c, c.Values[0])
		if err != nil {
			return Range{}, err
		}
		r.Start = append(slices.Clip(p), e...)
		if c.Op == OpGt {
			r.Start = successor(r.Start)
		}
	}
	if c := fc.upper; c != nil {
		e, err := encodeCond(t, *c, c.Values[0])
		if err != nil {
			return Range{}, err
		}
		r.End = append(slices.Clip(p), e...)
		if c.Op == OpLte {
			r.End = successor(r.End)
		}
	}
	return r, nil
}

// successor returns the least key greater than every key that starts with p: p with
// its trailing 0xFF bytes dropped and its last byte incremented, or nil (unbounded)
// when p is empty or all 0xFF.
func successor(p []byte) []byte {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] != 0xFF {
			s := slices.Clone(p[:i+1])
			s[i]++
			return s
		}
	}
	return nil
}
