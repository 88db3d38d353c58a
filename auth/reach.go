package auth

import "slices"

// What a caller may read across every collection, decided by the same rule as
// Access, collection by collection: for each name, the first grant that matches the
// caller and names it. A grant of "*" names every collection that no earlier
// matching grant named, so it decides "the rest", never the collections before it.

// Everything reports whether id reads every collection whole, whatever its name:
// each grant that matches id and decides a collection (no earlier matching grant
// named it) gives it whole, and a matching grant of "*" decides the rest whole.
func (p *Policy) Everything(id *Identity) bool {
	decided := make([]string, 0, 16)
	for _, g := range p.grants {
		if !g.matches(id) {
			continue
		}
		if slices.Contains(g.Collections, "*") {
			return g.Rows == nil
		}
		for _, c := range g.Collections {
			if !slices.Contains(decided, c) {
				if g.Rows != nil {
					return false // scoped, or refused for a missing claim
				}
				decided = append(decided, c)
			}
		}
	}
	return false // no grant of "*": the collections none names are refused
}

// Anything reports whether id may read any collection at all, whole or through a
// scope: a grant that matches id and decides some collection (no earlier matching
// grant named it) gives it. A scoped grant whose claim id lacks decides its
// collections too, as refused. An identity granted nothing is answered 403 on every
// route that reports on the dataset.
func (p *Policy) Anything(id *Identity) bool {
	decided := make([]string, 0, 16)
	for _, g := range p.grants {
		if !g.matches(id) {
			continue
		}
		gives := g.Rows == nil
		if !gives {
			_, gives = id.claimText(g.Rows.Claim)
		}
		if slices.Contains(g.Collections, "*") {
			return gives // it decides every collection no earlier grant named
		}
		for _, c := range g.Collections {
			if !slices.Contains(decided, c) {
				if gives {
					return true
				}
				decided = append(decided, c)
			}
		}
	}
	return false
}
