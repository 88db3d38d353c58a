package cli

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestExamplesAreValid: every command's help has an example, and every line of it
// names the program, resolves to that command or one of its subcommands (a root's may
// show any), and
// parses: its flags exist and take the values given, its arguments are as many (and
// its versions as valid) as the command wants, and its environment variables are ones
// the binaries read, with values their flags accept.
func TestExamplesAreValid(t *testing.T) {
	trees := map[string]func() *cobra.Command{
		"syncer": func() *cobra.Command {
			return (&Syncer{Getenv: env(nil), Stdout: io.Discard, Stderr: io.Discard}).command()
		},
		"metadata-api": func() *cobra.Command {
			return (&MetadataAPI{Getenv: env(nil), Stdout: io.Discard, Stderr: io.Discard}).command()
		},
	}
	for prog, newTree := range trees {
		tree := func() *cobra.Command {
			root := newTree()
			root.InitDefaultHelpCmd()
			setupCompletion(root, []string{"completion"})
			return root
		}
		root := tree()
		var commands []*cobra.Command
		var walk func(*cobra.Command)
		walk = func(c *cobra.Command) {
			if !c.Hidden {
				commands = append(commands, c)
			}
			for _, sub := range c.Commands() {
				walk(sub)
			}
		}
		walk(root)
		if len(commands) < 6 {
			t.Fatalf("%s: only %d commands", prog, len(commands))
		}
		for _, c := range commands {
			if strings.TrimSpace(c.Example) == "" {
				t.Errorf("%s has no example", c.CommandPath())
			}
			for _, line := range strings.Split(c.Example, "\n") {
				if err := checkExample(tree(), c.CommandPath(), c == root, line); err != nil {
					t.Errorf("%s: example %q: %v", c.CommandPath(), line, err)
				}
			}
		}
	}
}

// checkExample parses one example line against a fresh command tree.
func checkExample(root *cobra.Command, path string, anyCommand bool, line string) error {
	line = strings.TrimSpace(line)
	if _, inner, ok := strings.Cut(line, "<("); ok { // source <(prog completion bash)
		line = strings.TrimSuffix(inner, ")")
	}
	words, err := shellWords(line)
	if err != nil {
		return err
	}
	known := map[string]bool{EnvPostgresDSN: true, EnvEmulatorHost: true, EnvAdminToken: true}
	vars := map[string]string{}
	for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
		k, v, _ := strings.Cut(words[0], "=")
		vars[k] = v
		words = words[1:]
	}
	for i, w := range words {
		if w == ">" || w == "|" {
			words = words[:i]
			break
		}
	}
	if len(words) == 0 || words[0] != root.Name() {
		return fmt.Errorf("want it to run %s", root.Name())
	}
	cmd, rest, err := root.Find(words[1:])
	if err != nil {
		return err
	}
	if !anyCommand && cmd.CommandPath() != path && !strings.HasPrefix(cmd.CommandPath(), path+" ") {
		return fmt.Errorf("it runs %s", cmd.CommandPath())
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return err
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		return err
	}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		for _, k := range f.Annotations[envAnnotation] {
			known[k] = true
		}
	})
	for k := range vars {
		if !known[k] {
			return fmt.Errorf("%s is no variable %s reads", k, cmd.CommandPath())
		}
	}
	return applyEnv(cmd.Flags(), func(k string) string { return vars[k] })
}

// shellWords splits a command line as a POSIX shell would, for the quoting examples use.
func shellWords(s string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		quote rune
		in    bool
	)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c", quote)
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}
