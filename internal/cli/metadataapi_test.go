package cli

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestMetadataAPIEnvErrorsNameTheVariable: a malformed environment value is a usage
// error naming the variable, not silently replaced by the default; a flag given on the
// command line wins over the variable.
func TestMetadataAPIEnvErrorsNameTheVariable(t *testing.T) {
	for _, key := range []string{EnvRefresh, EnvCacheSize, EnvMaxStale} {
		m := &MetadataAPI{Getenv: env(map[string]string{key: "abc"}), Stderr: io.Discard}
		err := m.Run(context.Background(), []string{"--addr", "127.0.0.1:0"})
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), key) {
			t.Errorf("%s=abc: Run = %v; want a usage error naming %s", key, err, key)
		}
	}
	m := &MetadataAPI{Getenv: env(map[string]string{EnvCacheSize: "abc"}), Stderr: io.Discard}
	err := m.Run(context.Background(), []string{"--addr", "127.0.0.1:0", "--cache-size", "10", "--pointer-refresh", "0s"})
	if err == nil || strings.Contains(err.Error(), EnvCacheSize) || !strings.Contains(err.Error(), "--pointer-refresh") {
		t.Errorf("with --cache-size given, Run = %v; want the flag to win over %s (and the zero refresh refused)", err, EnvCacheSize)
	}
}

// TestMetadataAPIRefusesNoWatchers: --max-watchers must leave room for one.
func TestMetadataAPIRefusesNoWatchers(t *testing.T) {
	m := &MetadataAPI{Getenv: env(nil), Stderr: io.Discard}
	err := m.Run(context.Background(), []string{"--addr", "127.0.0.1:0", "--max-watchers", "0"})
	if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "--max-watchers") {
		t.Errorf("--max-watchers 0: Run = %v; want a usage error naming the flag", err)
	}
}

// TestMetadataAPIRefusesZeroCache: --cache-size 0 (or SNAPFLIP_CACHE_SIZE=0) is a usage
// error, not the default in disguise, nor the cache off.
func TestMetadataAPIRefusesZeroCache(t *testing.T) {
	for _, tc := range []struct {
		name   string
		getenv map[string]string
		args   []string
	}{
		{"flag", nil, []string{"--cache-size", "0"}},
		{"variable", map[string]string{EnvCacheSize: "0"}, nil},
	} {
		m := &MetadataAPI{Getenv: env(tc.getenv), Stderr: io.Discard}
		err := m.Run(context.Background(), append([]string{"--addr", "127.0.0.1:0"}, tc.args...))
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "--cache-size") {
			t.Errorf("%s: Run = %v; want a usage error naming --cache-size", tc.name, err)
		}
	}
}
