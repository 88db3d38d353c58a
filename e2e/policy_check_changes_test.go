package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
)

// ---- The changes ----

// checkChanges reads each layered version's changes to the collection, a page at a
// time: the ids whose row is or was in the scope, nothing else in a page or cursor,
// and, for a scoped caller, one kind for every version that changed nothing it reads
// (whether others' rows changed is not its to know).
func (p *policyProbe) checkChanges(c string) {
	const route = "GET /v1/versions/{v}/changes/{c}"
	d := p.dec[c]
	quiet := map[string][]int{} // kind → the versions that changed nothing the caller reads
	for at := 1; at < len(p.w.versions); at++ {
		path := changesPath(p.w.versions[at], c) + "?limit=" + p.limit(c)
		request := "GET " + path + fmt.Sprintf(" (version %d) and its pages", at+1)
		got, cursors, bad := p.readChanges(path)
		if bad != nil {
			p.failRead(route, request, *bad, "200")
			continue
		}
		want := p.w.changesFor(at, c, d)
		layered := got.Kind == "delta" || got.Kind == "unchanged"
		switch {
		case layered && got.Parent != p.w.versions[at-1]:
			p.fail(route, ruleChanges, request, fmt.Sprintf("%s against %s", got.Kind, got.Parent), "against version "+strconv.Itoa(at))
		case layered && !slices.Equal(got.Changes, want):
			p.fail(route, ruleChanges, request, changesString(got.Changes), changesString(want))
		case !layered && len(got.Changes) > 0:
			p.fail(route, ruleChanges, request, got.Kind+" listing "+changesString(got.Changes), "a "+got.Kind+" lists no ids")
		}
		if layered && len(want) == 0 {
			quiet[got.Kind] = append(quiet[got.Kind], at+1)
		}
		now, before := p.w.visible(at, c, d), p.w.visible(at-1, c, d)
		p.checkTokens(route, c, request, cursors, func(id string) bool {
			_, in := now[id]
			_, was := before[id]
			return in || was
		})
	}
	if d.access == scoped && len(quiet) > 1 {
		p.fail(route, ruleKind, fmt.Sprintf("GET /v1/versions/{v}/changes/%s of every version", c),
			fmt.Sprintf("kinds by the versions that changed nothing in the scope: %v", quiet),
			"one kind for every version that changed nothing in the scope, whether or not others' rows changed")
	}
}

// readChanges follows a changes listing's next cursors.
func (p *policyProbe) readChanges(path string) (changesPage, []string, *answer) {
	var all changesPage
	var cursors []string
	for next := ""; len(cursors) < 100; {
		target := path
		if next != "" {
			target += "&after=" + url.QueryEscape(next)
		}
		a := p.get(target)
		var page changesPage
		if a.status != http.StatusOK || json.Unmarshal(a.body, &page) != nil {
			return all, cursors, &a
		}
		if next == "" {
			all = page
			all.Changes = nil
		}
		all.Changes = append(all.Changes, page.Changes...)
		if next = page.Next; next == "" {
			break
		}
		cursors = append(cursors, next)
	}
	return all, cursors, nil
}
