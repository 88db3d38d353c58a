package client

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// TokenSource returns the bearer token a request is sent with; Config.Token takes one.
type TokenSource func(ctx context.Context) (string, error)

// TokenFile returns a TokenSource that reads the token from a file, such as a
// Kubernetes projected service-account token
// (/var/run/secrets/tokens/snapflip): it reads the file again whenever it changed, as
// the kubelet rotates it, and otherwise answers from memory.
func TokenFile(path string) TokenSource {
	var mu sync.Mutex
	var token string
	var mod time.Time
	var size int64
	return func(context.Context) (string, error) {
		fi, err := os.Stat(path)
		if err != nil {
			return "", fmt.Errorf("bearer token file: %w", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if token != "" && fi.ModTime().Equal(mod) && fi.Size() == size {
			return token, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("bearer token file: %w", err)
		}
		t := strings.TrimSpace(string(b))
		if t == "" {
			return "", fmt.Errorf("bearer token file %s: empty", path)
		}
		token, mod, size = t, fi.ModTime(), fi.Size()
		return token, nil
	}
}

// authorize sets the request's Authorization header from the configured token
// source, if any.
func (c *Client) authorize(ctx context.Context, req *http.Request) error {
	if c.cfg.Token == nil {
		return nil
	}
	t, err := c.cfg.Token(ctx)
	if err != nil {
		return fmt.Errorf("snapflip: bearer token: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+t)
	return nil
}
