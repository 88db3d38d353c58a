package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Both binaries' command lines are cobra commands (github.com/spf13/cobra, with pflag's
// GNU-style flags): subcommands, flags before or after the command, generated help
// with examples, and shell completion. This file holds what the two share: the root,
// environment variables behind flags, argument checks, and the classification of
// errors into usage mistakes (exit 2) and failures (exit 1).

// envAnnotation is the pflag annotation that names a flag's environment variable.
const envAnnotation = "snapflip_env"

// newRoot makes root, which names and describes the program (Use, Short, Long,
// Example), a root command that writes help, versions and completion scripts to
// stdout, prints no errors itself (main does, once: see Report), and applies the
// environment variables of the flags the command line left alone before any command
// runs.
func newRoot(root *cobra.Command, stdout, stderr io.Writer, getenv func(string) string) *cobra.Command {
	name := root.Use
	root.Version = BuildVersion()
	root.SilenceErrors = true
	root.SilenceUsage = true
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if cmd.Name() == "help" || cmd.HasParent() && cmd.Parent().Name() == "completion" {
			return nil // help and completion scripts never depend on the environment
		}
		return applyEnv(cmd.Flags(), getenv)
	}
	// Complete no file names unless a flag or command says otherwise.
	root.ValidArgsFunction = cobra.NoFileCompletions
	root.SuggestionsMinimumDistance = 2
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageErrorf(cmd, "%v", err)
	})
	root.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	// A command that runs only to say what is missing (a root, completion) shows
	// "prog [command]" as its usage, not "prog [flags]" too.
	root.SetUsageTemplate(strings.Replace(root.UsageTemplate(), "{{if .Runnable}}", "{{if and .Runnable (not .HasAvailableSubCommands)}}", 1))
	root.SetHelpCommand(helpCommand(name))
	// Defined now rather than at execution, so that -h and --version before a command
	// are known to take no value when cobra looks for the command among the arguments.
	root.InitDefaultHelpFlag()
	root.InitDefaultVersionFlag()
	return root
}

// execute runs root on args (without the program name). An error that cobra found
// before any command's RunE started (an unknown command, flag or help topic, a flag
// value that does not parse, a wrong number of arguments) wraps ErrUsage; a RunE's own
// errors are returned as they are.
func execute(ctx context.Context, root *cobra.Command, args []string) error {
	ran := false
	var wrap func(*cobra.Command)
	wrap = func(c *cobra.Command) {
		if run := c.RunE; run != nil {
			c.RunE = func(cmd *cobra.Command, args []string) error {
				ran = true
				return run(cmd, args)
			}
		}
		for _, sub := range c.Commands() {
			wrap(sub)
		}
	}
	if args == nil {
		args = []string{} // cobra reads os.Args when given nil
	}
	setupCompletion(root, args)
	wrap(root)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil && !ran && !errors.Is(err, ErrUsage) {
		err = usageErrorf(root, "%v", err)
	}
	return err
}

// setupCompletion adds cobra's `completion` command now rather than during execution
// (a single-command program gets it only when it is called), with an example for each
// shell, and makes a missing or unknown shell a usage error instead of a help printed
// with exit status 0.
func setupCompletion(root *cobra.Command, args []string) {
	root.InitDefaultCompletionCmd(args...)
	var comp *cobra.Command
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			comp = c
		}
	}
	if comp == nil {
		return
	}
	prog := root.Name()
	examples := map[string]string{
		"bash":       fmt.Sprintf("  %[1]s completion bash > /etc/bash_completion.d/%[1]s\n  source <(%[1]s completion bash)", prog),
		"zsh":        fmt.Sprintf("  %[1]s completion zsh > \"${fpath[1]}/_%[1]s\"", prog),
		"fish":       fmt.Sprintf("  %[1]s completion fish > ~/.config/fish/completions/%[1]s.fish", prog),
		"powershell": fmt.Sprintf("  %[1]s completion powershell | Out-String | Invoke-Expression", prog),
	}
	comp.Example = examples["bash"] + "\n" + examples["zsh"]
	for _, sh := range comp.Commands() {
		sh.Example = examples[sh.Name()]
	}
	comp.Args = cobra.ArbitraryArgs
	comp.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return usageErrorf(cmd, "no shell given: want bash, zsh, fish or powershell")
		}
		return usageErrorf(cmd, "unknown shell %q: want bash, zsh, fish or powershell", args[0])
	}
}

// usageErrorf returns a usage error (ErrUsage) that points at the command's help.
func usageErrorf(cmd *cobra.Command, format string, args ...any) error {
	return fmt.Errorf("%w: %s; see '%s --help'", ErrUsage, fmt.Sprintf(format, args...), cmd.CommandPath())
}

// Report prints err as "prog: error" on w, ending in exactly one newline, and returns
// the exit code documented in docs/configuration.md: 0 when err is nil, 2 for a usage mistake
// (ErrUsage), 1 for any other failure.
func Report(w io.Writer, prog string, err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintf(w, "%s: %s\n", prog, strings.TrimRight(err.Error(), "\n"))
	if errors.Is(err, ErrUsage) {
		return 2
	}
	return 1
}

// positional returns an argument check that wants exactly the named arguments.
func positional(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) == len(names):
			return nil
		case len(names) == 0:
			return usageErrorf(cmd, "%s takes no arguments, got %q", cmd.Name(), args)
		}
		return usageErrorf(cmd, "%s wants %d argument(s), %s, got %d", cmd.Name(), len(names), strings.Join(names, " "), len(args))
	}
}

// commandArgs is the argument check of a root with subcommands: any argument left is
// a command that does not exist.
func commandArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q", args[0])
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(s, " or "))
	}
	return usageErrorf(cmd, "%s", msg)
}

// helpCommand is `<prog> help [command]`: cobra's own, except that an unknown topic is
// a usage error rather than a root help printed with exit status 0.
func helpCommand(prog string) *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Long:  "Help prints the help of a command: what it does, an example, its flags.",
		Example: fmt.Sprintf(`  %[1]s help
  %[1]s help %[2]s`, prog, "completion"),
		ValidArgsFunction: func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			var out []cobra.Completion
			if len(args) == 0 {
				for _, sub := range c.Root().Commands() {
					if sub.IsAvailableCommand() && strings.HasPrefix(sub.Name(), toComplete) {
						out = append(out, cobra.CompletionWithDesc(sub.Name(), sub.Short))
					}
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return usageErrorf(c.Root(), "unknown help topic %q", strings.Join(args, " "))
			}
			cmd.InitDefaultHelpFlag()
			cmd.InitDefaultVersionFlag()
			return cmd.Help()
		},
	}
}

// bindEnv makes the flag fall back to the environment variable key when the command
// line does not give it, and says so in its help.
func bindEnv(fs *pflag.FlagSet, name, key string) {
	fs.Lookup(name).Usage += " (env " + key + ")"
	if err := fs.SetAnnotation(name, envAnnotation, []string{key}); err != nil {
		panic(err) // the flag was just looked up
	}
}

// envFlags defines flags backed by environment variables.
type envFlags struct{ fs *pflag.FlagSet }

// String defines a string flag backed by the environment variable key.
func (e envFlags) String(p *string, name, key, def, usage string) {
	e.fs.StringVar(p, name, def, usage)
	bindEnv(e.fs, name, key)
}

// checked is a string flag value that refuses what check refuses, so that a bad value
// is a usage error when the flag, or its environment variable, is parsed.
type checked struct {
	p     *string
	check func(string) error
	typ   string
}

func (c checked) String() string { return *c.p }
func (c checked) Type() string   { return c.typ }
func (c checked) Set(s string) error {
	if err := c.check(s); err != nil {
		return err
	}
	*c.p = s
	return nil
}

// logFlags defines cmd's --log-format (backed by SNAPFLIP_LOG_FORMAT) and --log-level
// in fs, both checked when parsed and completed by the shell.
func logFlags(cmd *cobra.Command, fs *pflag.FlagSet, format, level *string) {
	*format, *level = "text", "info"
	fs.Var(checked{format, func(s string) error {
		if s := strings.ToLower(s); s != "text" && s != "json" {
			return errors.New("want text or json")
		}
		return nil
	}, "text|json"}, "log-format", "log format")
	bindEnv(fs, "log-format", EnvLogFormat)
	fs.Var(checked{level, func(s string) error {
		var l slog.Level
		if l.UnmarshalText([]byte(s)) != nil {
			return errors.New("want debug, info, warn or error")
		}
		return nil
	}, "level"}, "log-level", "log level: debug, info, warn or error")
	_ = cmd.RegisterFlagCompletionFunc("log-format", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("log-level", cobra.FixedCompletions([]string{"debug", "info", "warn", "error"}, cobra.ShellCompDirectiveNoFileComp))
}

// applyEnv sets each flag of fs that the command line left alone from its environment
// variable (see bindEnv), parsed by the flag itself, so that a malformed value is a
// usage error naming the variable instead of being ignored.
func applyEnv(fs *pflag.FlagSet, getenv func(string) string) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		keys := f.Annotations[envAnnotation]
		if err != nil || len(keys) == 0 || f.Changed {
			return
		}
		v := getenv(keys[0])
		if v == "" {
			return
		}
		if e := f.Value.Set(v); e != nil {
			err = fmt.Errorf("%w: %s=%q: not a valid --%s: %v", ErrUsage, keys[0], v, f.Name, e)
		}
	})
	return err
}
