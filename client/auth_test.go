package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/snapflip/snapflip/auth/authtest"
	"github.com/snapflip/snapflip/internal/testenv"
)

// With the API's --auth, a client sends the token its TokenFile reads, re-reading
// the file as it is rotated; 401 and 403 are told apart and never retried; a Replica
// follows with the same token.
func TestBearerTokens(t *testing.T) {
	t.Parallel()
	e := start(t, config)
	is := authtest.NewIssuer(t)
	authFile := filepath.Join(t.TempDir(), "auth.yaml")
	if err := os.WriteFile(authFile, fmt.Appendf(nil, "allow_http: true\nissuers: [{issuer: %q, audience: snapflip}]\ngrants: [{subject: reader, collections: [docs]}]\n", is.URL()), 0o600); err != nil {
		t.Fatal(err)
	}
	e.startAPI(t, "--auth", authFile)
	e.sync(t)

	tokenPath := filepath.Join(t.TempDir(), "token")
	write := func(sub string) {
		t.Helper()
		// The kubelet's way: a new file renamed over the old one.
		tmp := tokenPath + ".new"
		if err := os.WriteFile(tmp, []byte(is.Token(authtest.Claims{"sub": sub, "aud": "snapflip"})+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, tokenPath); err != nil {
			t.Fatal(err)
		}
	}
	write("reader")
	c := newClient(t, e.Base, func(c *Config) { c.Token = TokenFile(tokenPath) })
	ctx := context.Background()
	testenv.Eventually(t, time.Minute, func() error {
		_, err := c.Get(ctx, "docs", "plain")
		return err
	})
	// Rotated to an identity without the grant (a token of another length, so the
	// file's size tells the change whatever the clock's grain): 403, once.
	write("stranger")
	_, err := c.Get(ctx, "docs", "plain")
	var ae *Error
	if !errors.Is(err, ErrForbidden) || errors.Is(err, ErrUnauthorized) || !errors.As(err, &ae) || ae.Attempts != 1 {
		t.Errorf("Get as a stranger: %v; want ErrForbidden after one attempt", err)
	}
	// No token at all: 401, once.
	bare := newClient(t, e.Base, nil)
	_, err = bare.Get(ctx, "docs", "plain")
	if !errors.Is(err, ErrUnauthorized) || !errors.As(err, &ae) || ae.Attempts != 1 {
		t.Errorf("Get without a token: %v; want ErrUnauthorized after one attempt", err)
	}
	// A missing token file is said as such.
	if _, err := newClient(t, e.Base, func(c *Config) { c.Token = TokenFile(tokenPath + ".none") }).Get(ctx, "docs", "plain"); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Get with a missing token file: %v; want it to say the file does not exist", err)
	}

	// A Replica streams and fetches with the token.
	write("reader")
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rcfg := DefaultReplicaConfig()
	rcfg.Collections = []string{"docs"}
	r, err := NewReplica(rctx, c, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		if _, ok := r.Get("docs", "plain"); !ok {
			return errors.New("the replica does not hold docs/plain yet")
		}
		return nil
	})
}
