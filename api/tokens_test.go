package api_test

import (
	"net/http"
	"strings"
	"testing"
)

// The token's answers through the HTTP layer: a malformed token is a 400 of its own
// type, on a collection named like a route too; a version that does not cover it a
// 412; the changes route's "after" stays its page cursor.
func TestTokenAnswers(t *testing.T) {
	h := newServer(t, &fakeReader{docs: map[string]string{"c\x00a": `{"id":"a"}`, "changes\x00a": `{"id":"a"}`}}, nil)
	for _, tc := range []struct {
		target string
		header []string
		status int
		typ    string
	}{
		{"/v1/data/c/a?after=bogus", nil, http.StatusBadRequest, "token-rejected"},
		{"/v1/data/changes?after=bogus", nil, http.StatusBadRequest, "token-rejected"},
		{"/v1/data/c/a", []string{"Snapshot-After", "x:5"}, http.StatusPreconditionFailed, "token-not-covered"},
		{"/v1/data/c/a?after=x:5", []string{"Snapshot-After", "x:6"}, http.StatusBadRequest, "token-rejected"},
		{"/v1/data/c/a?after=", nil, http.StatusBadRequest, "token-rejected"},
		{"/v1/data/c/a", []string{"Snapshot-After", "s:1:1:"}, http.StatusOK, ""},
		{"/v1/collections?after=s:1:1:", nil, http.StatusOK, ""},
	} {
		res, body := do(t, h, http.MethodGet, tc.target, "", tc.header...)
		if res.StatusCode != tc.status || !strings.Contains(string(body), tc.typ) {
			t.Errorf("GET %s %v = %d %s; want %d %s", tc.target, tc.header, res.StatusCode, body, tc.status, tc.typ)
		}
	}
}
