package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

// versionCommand is `<prog> version`: what --version prints.
func versionCommand(prog string) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this build",
		Long: `Version prints the version of this build: the module version Go recorded (a tag,
or a pseudo-version naming the commit, with "+dirty" for a modified work tree), the
commit, and the Go version. --version prints the same.`,
		Example: fmt.Sprintf("  %s version", prog),
		Args:    positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", prog, BuildVersion())
			return err
		},
	}
}
