package client

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// ver returns the version made at millisecond ms.
func ver(ms int) versionID {
	return parseVersion(fmt.Sprintf("00000000-0000-4000-8000-000000000000-%d", 1767225600000+ms))
}

// idSet returns a set of ids.
func idSet(list ...string) map[string]bool {
	out := map[string]bool{}
	for _, id := range list {
		out[id] = true
	}
	return out
}

// delta is the link of a version that changed ids against parent.
func delta(version, parent versionID, changed ...string) link {
	return link{version: version, kind: changesDelta, parent: parent, ids: idSet(changed...)}
}

func TestPlan(t *testing.T) {
	gone := &Error{StatusCode: http.StatusGone}
	notFound := &Error{StatusCode: http.StatusNotFound}
	down := &Error{StatusCode: http.StatusServiceUnavailable}
	held := holding{version: ver(10), docs: map[string]int{"a": 1000, "b": 1000}}
	one := []string{"a"}
	for _, tc := range []struct {
		name  string
		held  holding
		to    versionID
		colls []string
		links map[string][]link
		want  []step
	}{
		{"no pointer seen yet", holding{}, versionID{}, one, nil, []step{{kind: stepWait}}},
		{"the target is held", held, ver(10), one, nil, []step{{kind: stepWait}}},
		{"nothing held: every collection read whole", holding{}, ver(10), []string{"a", "b"}, nil,
			[]step{{kind: stepReload, collection: "a"}, {kind: stepReload, collection: "b"}}},
		{"a flip: learn the target's changes first", held, ver(11), []string{"a", "b"}, nil,
			[]step{{kind: stepLearn, collection: "a", version: ver(11)}, {kind: stepLearn, collection: "b", version: ver(11)}}},
		{"a child's delta", held, ver(11), one, map[string][]link{"a": {delta(ver(11), ver(10), "x", "y")}},
			[]step{{kind: stepChanges, collection: "a", ids: idSet("x", "y")}}},
		{"a child that left the collection unchanged", held, ver(11), one,
			map[string][]link{"a": {{version: ver(11), kind: changesUnchanged, parent: ver(10), ids: idSet()}}},
			[]step{{kind: stepChanges, collection: "a", ids: idSet()}}},
		{"a new base", held, ver(11), one, map[string][]link{"a": {{version: ver(11), kind: changesBase, parent: ver(10)}}},
			[]step{{kind: stepReload, collection: "a"}}},
		{"a full copy", held, ver(11), one, map[string][]link{"a": {{version: ver(11), kind: changesFull}}},
			[]step{{kind: stepReload, collection: "a"}}},
		{"a kind this client does not know", held, ver(11), one, map[string][]link{"a": {{version: ver(11), kind: changesOther, parent: ver(10)}}},
			[]step{{kind: stepReload, collection: "a"}}},
		{"two flips at once: learn the parent", held, ver(12), one, map[string][]link{"a": {delta(ver(12), ver(11), "x")}},
			[]step{{kind: stepLearn, collection: "a", version: ver(11)}}},
		{"two flips at once: their changes together", held, ver(12), one,
			map[string][]link{"a": {delta(ver(12), ver(11), "x"), delta(ver(11), ver(10), "y", "x")}},
			[]step{{kind: stepChanges, collection: "a", ids: idSet("x", "y")}}},
		{"a rollback: learn the held version's changes", held, ver(8), one, nil,
			[]step{{kind: stepLearn, collection: "a", version: ver(10)}}},
		{"a rollback to the held version's grandparent", held, ver(8), one,
			map[string][]link{"a": {delta(ver(10), ver(9), "x"), delta(ver(9), ver(8), "y")}},
			[]step{{kind: stepChanges, collection: "a", ids: idSet("x", "y")}}},
		{"a rollback to a version off the line", held, ver(8), one, map[string][]link{"a": {delta(ver(10), ver(7), "x")}},
			[]step{{kind: stepReload, collection: "a"}}},
		{"a parent older than the version held", held, ver(12), one, map[string][]link{"a": {delta(ver(12), ver(9), "x")}},
			[]step{{kind: stepReload, collection: "a"}}},
		{"no parent", held, ver(12), one, map[string][]link{"a": {delta(ver(12), versionID{}, "x")}},
			[]step{{kind: stepReload, collection: "a"}}},
		{"a line as long as maxChain", held, ver(13), one,
			map[string][]link{"a": {delta(ver(13), ver(12), "x"), delta(ver(12), ver(11), "y")}},
			[]step{{kind: stepReload, collection: "a"}}},
		{"changes of more than half the collection", held, ver(11), one,
			map[string][]link{"a": {delta(ver(11), ver(10), manyIDs(501)...)}},
			[]step{{kind: stepReload, collection: "a"}}},
		{"changes of half the collection", held, ver(11), one,
			map[string][]link{"a": {delta(ver(11), ver(10), manyIDs(500)...)}},
			[]step{{kind: stepChanges, collection: "a", ids: idSet(manyIDs(500)...)}}},
		{"changes of 100 ids of a small collection", holding{version: ver(10), docs: map[string]int{"a": 10}}, ver(11), one,
			map[string][]link{"a": {delta(ver(11), ver(10), manyIDs(100)...)}},
			[]step{{kind: stepChanges, collection: "a", ids: idSet(manyIDs(100)...)}}},
		{"a version gone", held, ver(12), one, map[string][]link{"a": {delta(ver(12), ver(11), "x"), {version: ver(11), err: gone}}},
			[]step{{kind: stepReload, collection: "a"}}},
		{"a version between without the collection", held, ver(12), one,
			map[string][]link{"a": {delta(ver(12), ver(11), "x"), {version: ver(11), err: notFound}}},
			[]step{{kind: stepReload, collection: "a"}}},
		{"the target without the collection", held, ver(11), one, map[string][]link{"a": {{version: ver(11), err: notFound}}},
			[]step{{kind: stepFail, collection: "a", err: notFound}}},
		{"the changes could not be read", held, ver(11), one, map[string][]link{"a": {{version: ver(11), err: down}}},
			[]step{{kind: stepFail, collection: "a", err: down}}},
		{"collections planned apart", held, ver(12), []string{"a", "b"},
			map[string][]link{"a": {delta(ver(12), ver(11), "x"), delta(ver(11), ver(10), "y")}, "b": {{version: ver(12), kind: changesBase}}},
			[]step{{kind: stepChanges, collection: "a", ids: idSet("x", "y")}, {kind: stepReload, collection: "b"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := plan(tc.held, target{to: pointer{Version: tc.to}, collections: tc.colls, maxChain: 2, links: tc.links})
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(step{}, versionID{}), cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

func manyIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(i)
	}
	return out
}
