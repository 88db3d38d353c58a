package api

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"

	"github.com/snapflip/snapflip/snapshot"
)

// Admin carries out rollbacks and unpins; snapshot.Admin implements it.
type Admin interface {
	// Rollback moves the pointer back and pins the dataset; refusals wrap
	// ErrTargetRefused, a busy lease ErrConflict.
	Rollback(ctx context.Context, req snapshot.RollbackRequest) (snapshot.RollbackResult, error)
	// Unpin resumes scheduled publishing; refusals wrap ErrTargetRefused.
	Unpin(ctx context.Context, reason, by string) (snapshot.RollbackResult, error)
}

// requireAdmin lets a request through only with "Authorization: Bearer <token>"
// holding the admin token (compared in constant time) or, with Auth, a token whose
// identity a grant with admin: true matches.
func (s *Server) requireAdmin(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok, err := s.isAdmin(r)
		switch {
		case ok && id != nil:
			s.callers.serve(next, w, r, id)
		case ok:
			next(w, r)
		case err != nil:
			unauthorized(w, "invalid_token", unauthenticatedWhy(err))
		case s.cfg.Auth != nil && r.Header.Get("Authorization") != "":
			writeProblem(w, Problem{Type: typeForbidden, Title: "Forbidden", Status: http.StatusForbidden,
				Detail: "the admin endpoints need an identity granted admin: true, or the admin token"})
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="snapflip-admin"`)
			writeProblem(w, Problem{Type: typeUnauthorized, Title: "Unauthorized", Status: http.StatusUnauthorized,
				Detail: "the admin endpoints need Authorization: Bearer <SNAPFLIP_ADMIN_TOKEN>"})
		}
	}
}

// caller names who called an admin endpoint, for the audit trail: the verified
// identity's subject when it came with one, and the address.
func (s *Server) caller(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if id := s.identity(r); id != nil {
		return "api-admin:" + truncate(id.Subject, 200) + "@" + host
	}
	return "api-admin@" + host
}

// decodeStrict decodes a JSON body of at most limit bytes into v, refusing unknown
// fields; a malformed body is a bad request that shows the expected shape.
func decodeStrict(w http.ResponseWriter, r *http.Request, limit int64, v any, shape string) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return err
		}
		return badRequest("body: want %s: %v", shape, err)
	}
	return nil
}

// adminBodyLimit bounds an admin request's body.
const adminBodyLimit = 64 << 10

type rollbackBody struct {
	To       string `json:"to"`
	Previous bool   `json:"previous"`
	Reason   string `json:"reason"`
	Force    bool   `json:"force"`
}

func (s *Server) adminRollback(w http.ResponseWriter, r *http.Request) error {
	var b rollbackBody
	if err := decodeStrict(w, r, adminBodyLimit, &b, `{"to": "VERSION" or "previous": true, "reason": "...", "force": false}`); err != nil {
		return err
	}
	req := snapshot.RollbackRequest{Previous: b.Previous, Reason: b.Reason, Force: b.Force, By: s.caller(r)}
	if b.To != "" {
		v, err := snapshot.ParseVersion(b.To)
		if err != nil {
			return err
		}
		req.To = v
	}
	res, err := s.cfg.Admin.Rollback(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (s *Server) adminUnpin(w http.ResponseWriter, r *http.Request) error {
	var b struct {
		Reason string `json:"reason"`
	}
	if err := decodeStrict(w, r, adminBodyLimit, &b, `{"reason": "..."}`); err != nil {
		return err
	}
	res, err := s.cfg.Admin.Unpin(r.Context(), strings.TrimSpace(b.Reason), s.caller(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}
