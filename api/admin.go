package api

import (
	"context"
	"crypto/subtle"
	"encoding/json"
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

// requireToken lets a request through only with "Authorization: Bearer <token>",
// compared in constant time.
func (s *Server) requireToken(next http.HandlerFunc) http.HandlerFunc {
	want := []byte("Bearer " + s.cfg.AdminToken)
	return func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="snapflip-admin"`)
			writeProblem(w, Problem{Type: typeUnauthorized, Title: "Unauthorized", Status: http.StatusUnauthorized,
				Detail: "the admin endpoints need Authorization: Bearer <SNAPFLIP_ADMIN_TOKEN>"})
			return
		}
		next(w, r)
	}
}

// caller names who called an admin endpoint, for the audit trail.
func caller(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "api-admin@" + host
}

// decodeStrict decodes a JSON body into v, refusing unknown fields.
func (s *Server) decodeStrict(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if _, ok := err.(*http.MaxBytesError); ok {
			return err
		}
		return badRequest("body: %v", err)
	}
	return nil
}

type rollbackBody struct {
	To       string `json:"to"`
	Previous bool   `json:"previous"`
	Reason   string `json:"reason"`
	Force    bool   `json:"force"`
}

func (s *Server) adminRollback(w http.ResponseWriter, r *http.Request) {
	var b rollbackBody
	if err := s.decodeStrict(w, r, &b); err != nil {
		s.writeError(w, r, err)
		return
	}
	req := snapshot.RollbackRequest{Previous: b.Previous, Reason: b.Reason, Force: b.Force, By: caller(r)}
	if b.To != "" {
		v, err := snapshot.ParseVersion(b.To)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		req.To = v
	}
	res, err := s.cfg.Admin.Rollback(r.Context(), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) adminUnpin(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Reason string `json:"reason"`
	}
	if err := s.decodeStrict(w, r, &b); err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.cfg.Admin.Unpin(r.Context(), strings.TrimSpace(b.Reason), caller(r))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
