package auth

import "slices"

// What a caller may read across every collection, decided by the same rule as
// Access, collection by collection: for each name, the first grant that matches the
// caller and names it. A grant of "*" names every collection that no earlier
// matching grant named, so it decides "the rest", never the collections before it.

// Everything reports whether id reads every collection whole, whatever its name:
// a matching grant of "*" whole, with every matching grant before it whole too (a
// scoped one before it decides its collections as scoped).
func (p *Policy) Everything(id *Identity) bool {
	for _, g := range p.grants {
		if !g.matches(id) {
			continue
		}
		if g.Rows != nil {
			return false
		}
		if slices.Contains(g.Collections, "*") {
			return true
		}
	}
	return false
}

// Anything reports whether id may read any collection at all, whole or through a
// scope: a matching grant that decides some collection and gives it. An identity
// granted nothing is answered 403 on every route that reports on the dataset.
func (p *Policy) Anything(id *Identity) bool {
	for i, g := range p.grants {
		if !g.matches(id) {
			continue
		}
		if g.Rows != nil {
			if _, ok := id.claimText(g.Rows.Claim); !ok {
				continue // it decides its collections as NoClaim
			}
		}
		if slices.Contains(g.Collections, "*") || slices.ContainsFunc(g.Collections, func(c string) bool {
			return !p.decidedBefore(i, id, c)
		}) {
			return true
		}
	}
	return false
}

// decidedBefore reports whether a grant before the i-th matches id and names the
// collection.
func (p *Policy) decidedBefore(i int, id *Identity, collection string) bool {
	return slices.ContainsFunc(p.grants[:i], func(g Grant) bool { return g.matches(id) && g.names(collection) })
}
