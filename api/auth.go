package api

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/snapflip/snapflip/auth"
	"github.com/snapflip/snapflip/index"
	"github.com/snapflip/snapflip/snapshot"
)

// Auth turns authentication on: every route but /healthz, /readyz, /metrics and
// /openapi.yaml needs a verified bearer token, and each collection the grants of the
// identity it proves.
type Auth struct {
	// Verifier verifies a bearer token (auth.Verifier); errors wrap
	// auth.ErrUnauthenticated.
	Verifier interface {
		Verify(ctx context.Context, raw string) (*auth.Identity, error)
	}
	// Policy answers an identity's grants.
	Policy *auth.Policy
	// CursorKey seals the position a scoped caller's changes cursor carries (it may
	// stand after an id outside the scope). Every replica of the API must have the
	// same key, or a cursor reads only on the replica that made it; empty: a random
	// key per process.
	CursorKey []byte
}

// authRealm is the realm of every WWW-Authenticate challenge.
const authRealm = `Bearer realm="snapflip"`

// authenticate lets a request through with the identity its bearer token proves, or
// answers 401 with a challenge saying why (RFC 6750). Without Auth it lets every
// request through.
func (s *Server) authenticate(next http.Handler) http.Handler {
	if s.cfg.Auth == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, err := bearer(r)
		if err != nil {
			unauthorized(w, "invalid_request", err.Error())
			return
		}
		if raw == "" {
			unauthorized(w, "", "this API needs Authorization: Bearer <token>")
			return
		}
		id, err := s.cfg.Auth.Verifier.Verify(r.Context(), raw)
		if err != nil {
			unauthorized(w, "invalid_token", unauthenticatedWhy(err))
			return
		}
		if !s.cfg.Auth.Policy.Anything(id) {
			// Granted nothing, it learns nothing of the dataset: not its versions,
			// not its flips, and it holds none of the watchers or waiters others share.
			writeProblem(w, Problem{Type: typeForbidden, Title: "Forbidden", Status: http.StatusForbidden,
				Detail: "your identity is granted no collection"})
			return
		}
		// The identity goes on with the request: the handlers never verify the
		// token again.
		s.callers.serve(next, w, r, id)
	})
}

// bearer returns the request's bearer token ("" when it sends none), or why the
// request is malformed: a token in the query string, two Authorization headers, or
// another scheme.
func bearer(r *http.Request) (string, error) {
	if r.URL.RawQuery != "" && r.URL.Query().Has("access_token") {
		return "", errors.New("a token in the query string is refused (it would reach logs): send Authorization: Bearer <token>")
	}
	hs := r.Header.Values("Authorization")
	switch {
	case len(hs) == 0:
		return "", nil
	case len(hs) > 1:
		return "", errors.New("more than one Authorization header")
	}
	scheme, raw, ok := strings.Cut(hs[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(raw) == "" {
		return "", errors.New("want Authorization: Bearer <token>")
	}
	return strings.TrimSpace(raw), nil
}

// unauthorized answers 401 with a Bearer challenge; code is RFC 6750's error code (""
// for a request that sent no credentials).
func unauthorized(w http.ResponseWriter, code, detail string) {
	challenge := authRealm
	if code != "" {
		challenge += fmt.Sprintf(`, error=%q, error_description=%q`, code, strings.ReplaceAll(truncate(detail, 300), `"`, "'"))
	}
	w.Header().Set("WWW-Authenticate", challenge)
	writeProblem(w, Problem{Type: typeUnauthorized, Title: "Unauthorized", Status: http.StatusUnauthorized, Detail: detail})
}

// forbiddenError is a verified caller asking for what its grants do not give; it
// names the request's collection only.
type forbiddenError struct{ msg string }

func (e *forbiddenError) Error() string { return e.msg }

// identity returns the request's verified caller, which authenticate (or
// requireAdmin) admitted it with; nil without Auth, and on the routes they do not
// guard.
func (s *Server) identity(r *http.Request) *auth.Identity {
	if s.cfg.Auth == nil {
		return nil
	}
	return s.callers.of(r)
}

// verified returns the identity the request's bearer token proves, for a route
// authenticate does not guard (the admin endpoints): nil without Auth or a token, and
// an error for a malformed header or a token that does not verify.
func (s *Server) verified(r *http.Request) (*auth.Identity, error) {
	if s.cfg.Auth == nil {
		return nil, nil
	}
	raw, err := bearer(r)
	if err != nil || raw == "" {
		return nil, err
	}
	return s.cfg.Auth.Verifier.Verify(r.Context(), raw)
}

// grant returns the row scope a request reads the collection through (nil for every
// document), or a forbiddenError when the caller may not read it. Without Auth every
// collection is read whole. It reads no storage.
func (s *Server) grant(r *http.Request, collection string) (*auth.Scope, error) {
	return s.callerOf(r).grant(collection)
}

// grantee is a request's verified identity with the policy that answers it, looked up
// once for a request that asks about several collections.
type grantee struct {
	policy *auth.Policy // nil without Auth: every collection is read whole
	id     *auth.Identity
}

func (s *Server) callerOf(r *http.Request) grantee {
	if s.cfg.Auth == nil {
		return grantee{}
	}
	return grantee{policy: s.cfg.Auth.Policy, id: s.identity(r)}
}

func (c grantee) grant(collection string) (*auth.Scope, error) {
	if c.policy == nil {
		return nil, nil
	}
	if c.id == nil {
		// A route authenticate does not guard: nothing is granted there.
		return nil, &forbiddenError{msg: "no verified identity"}
	}
	switch access, scope := c.policy.Access(c.id, collection); access {
	case auth.Whole:
		return nil, nil
	case auth.Scoped:
		// A copy, so that only a scoped read allocates one: the address of scope
		// itself would move it to the heap on every path.
		scoped := scope
		return &scoped, nil
	}
	return nil, &forbiddenError{msg: fmt.Sprintf("collection %q: your identity is not granted it", truncate(collection, 128))}
}

// seesAll reports whether the caller reads every collection whole, by the rule
// Access applies collection by collection (auth.Policy.Everything): then it may be
// told what the dataset holds in all of them.
func (s *Server) seesAll(r *http.Request) bool {
	c := s.callerOf(r)
	if c.policy == nil {
		return true
	}
	return c.id != nil && c.policy.Everything(c.id)
}

// readable returns, of the collections names, those the caller may read, whether it
// reads each whole, and whether it reads all of them whole (then it may be told
// their counts).
func (s *Server) readable(r *http.Request, names []string) (out []string, whole map[string]bool, all bool) {
	c := s.callerOf(r)
	whole, all = make(map[string]bool, len(names)), true
	for _, name := range names {
		scope, err := c.grant(name)
		if err != nil {
			all = false
			continue
		}
		out = append(out, name)
		whole[name] = scope == nil
		all = all && scope == nil
	}
	return out, whole, all
}

// isAdmin reports whether the request may call the admin endpoints: it carries the
// admin token (id nil), or (with Auth) an identity id a grant with admin: true
// matches.
func (s *Server) isAdmin(r *http.Request) (id *auth.Identity, ok bool, err error) {
	if t := s.cfg.AdminToken; t != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+t)) == 1 {
		return nil, true, nil
	}
	if id, err = s.verified(r); id == nil {
		return nil, false, err
	}
	return id, s.cfg.Auth.Policy.Admin(id), nil
}

// scopeMatch is a row scope made concrete for one collection of one version: the
// condition a filter adds, and the test of one document.
type scopeMatch struct {
	cond  index.Cond
	typ   index.Type
	field string
	want  []byte // the claim's value, encoded as the index encodes the field; nil when its type cannot hold it
}

// scopeIn returns the caller's scope made concrete in the view's collection, nil
// without a scope. named says the request named the version (a pin, a page token, or
// the path): a version it chose that cannot apply the scope is the caller's to
// change (403), the current one the operator's (500).
func (s *Server) scopeIn(r *http.Request, view snapshot.View, named bool, collection string, scope *auth.Scope) (*scopeMatch, error) {
	if scope == nil {
		return nil, nil
	}
	m, err := matchScope(view, collection, scope)
	var unserved *unservedScopeError
	if errors.As(err, &unserved) && named {
		cur, cerr := s.reader.Current(r.Context())
		unserved.named = cerr == nil && cur.Version != view.Version
	}
	return m, err
}

// matchScope returns the scope's match in the view's collection: the field's type is
// that of an index whose first field it is; a collection without such an index is
// not served to scoped callers.
func matchScope(view snapshot.View, collection string, scope *auth.Scope) (*scopeMatch, error) {
	c, ok := view.Manifest.Collections[collection]
	if !ok {
		return nil, fmt.Errorf("collection %q: %w", collection, snapshot.ErrNotFound)
	}
	for _, d := range c.Indexes {
		if len(d.Fields) == 0 || d.Fields[0] != scope.Field {
			continue
		}
		def, err := index.Typed(d)
		if err != nil {
			return nil, err
		}
		m := &scopeMatch{cond: index.Cond{Field: scope.Field, Op: index.OpEq, Values: []string{scope.Value}},
			typ: def.Types[0], field: scope.Field}
		m.want, _ = index.EncodeText(m.typ, scope.Value)
		return m, nil
	}
	return nil, &unservedScopeError{collection: collection, field: scope.Field, version: view.Version}
}

// unservedScopeError is a scoped read of a collection whose version has no index for
// the scope. Of the current version (its config changed since the API started) it
// is the server's fault, which it says plainly rather than as an anonymous internal
// error; of an older version the request named (made before the index), the caller
// may not read it there.
type unservedScopeError struct {
	collection, field string
	version           snapshot.Version
	named             bool // an older version the request named
}

func (e *unservedScopeError) Error() string {
	if e.named {
		return fmt.Sprintf("collection %s is read through your row scope on %s, which version %s cannot apply: it has no index whose first field is %s; read the current version",
			e.collection, e.field, e.version, e.field)
	}
	return fmt.Sprintf("collection %s is read through a row scope on %s, but version %s has no index whose first field is %s: the operator must declare one (indexes: [[%s, …]])",
		e.collection, e.field, e.version, e.field, e.field)
}

// holds reports whether the document body is in the scope.
func (m *scopeMatch) holds(body []byte) bool {
	if m.want == nil {
		return false
	}
	vals, err := index.Fields(body, []string{m.field})
	if err != nil || vals[0] == nil {
		return false
	}
	got, err := index.Encode(m.typ, vals[0])
	return err == nil && bytes.Equal(got, m.want)
}

// ScopeIndexes checks that every collection of the manifest a row scope of c reads
// has an index whose first field is the scope's: the API refuses to start without
// one, as `syncer check` does.
func ScopeIndexes(c auth.Config, m snapshot.Manifest) error {
	indexes := make(map[string][][]string, len(m.Collections))
	for name, col := range m.Collections {
		for _, d := range col.Indexes {
			indexes[name] = append(indexes[name], d.Fields)
		}
		if _, ok := indexes[name]; !ok {
			indexes[name] = nil
		}
	}
	if u := c.UnservedScopes(indexes); len(u) > 0 {
		return fmt.Errorf("%w: collection %s is scoped by %s, but has no index whose first field is %s (version %s): declare one",
			auth.ErrConfig, u[0].Collection, u[0].Field, u[0].Field, m.Version)
	}
	return nil
}

// unauthenticatedWhy returns why a bearer token proved no identity, for the
// WWW-Authenticate header: the reason Verify gave.
func unauthenticatedWhy(err error) string {
	if ue := (*auth.UnauthenticatedError)(nil); errors.As(err, &ue) {
		return ue.Reason.Error()
	}
	return err.Error()
}
