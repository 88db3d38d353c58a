package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

// ErrUsage marks a command-line mistake; the binaries exit 2 for it.
var ErrUsage = errors.New("usage")

// newLogger returns a slog logger writing text or JSON to w.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", ErrUsage, level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(format) {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("%w: --log-format %q: want text or json", ErrUsage, format)
}

// envOr returns getenv(key), or def when it is empty.
func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

// writerID names this process in manifests and flips: host, pid and client id.
func writerID(client string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), client)
}

// applyEnv sets each flag the command line left alone from its environment variable
// (pairs of flag name, variable), parsed by the flag itself, so that a malformed value
// is a usage error naming the variable instead of being ignored.
func applyEnv(fs *flag.FlagSet, getenv func(string) string, pairs ...string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for i := 0; i+1 < len(pairs); i += 2 {
		name, key := pairs[i], pairs[i+1]
		v := getenv(key)
		if v == "" || given[name] {
			continue
		}
		if err := fs.Set(name, v); err != nil {
			return fmt.Errorf("%w: %s %q: %v", ErrUsage, key, v, err)
		}
	}
	return nil
}
