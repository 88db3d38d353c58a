package cli

import (
	"encoding"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// configDoc is the page that documents every config field, command, flag and
// environment variable; the tests below keep it and the code in step.
const configDoc = "../../docs/configuration.md"

// docTable returns the rows of the Markdown table in doc whose header row is header
// (its cells, in order), each row as its cells with surrounding spaces trimmed.
func docTable(tb testing.TB, doc string, header ...string) [][]string {
	tb.Helper()
	var rows [][]string
	in := false
	for line := range strings.SplitSeq(doc, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if in {
				break
			}
			continue
		}
		cells := tableCells(line)
		switch {
		case !in && slices.Equal(cells, header):
			in = true
		case in && !strings.HasPrefix(cells[0], "---"):
			rows = append(rows, cells)
		}
	}
	if !in {
		tb.Fatalf("%s: no table with the header %q", configDoc, header)
	}
	return rows
}

// tableCells splits a table row at its unescaped bars.
func tableCells(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	var cells []string
	var cell strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cell.WriteByte('|')
			i++
		case line[i] == '|':
			cells = append(cells, strings.TrimSpace(cell.String()))
			cell.Reset()
		default:
			cell.WriteByte(line[i])
		}
	}
	return append(cells, strings.TrimSpace(cell.String()))
}

// code returns the text of a cell that is one code span, and whether it is one.
func code(cell string) (string, bool) {
	if len(cell) < 2 || cell[0] != '`' || cell[len(cell)-1] != '`' || strings.Count(cell, "`") != 2 {
		return "", false
	}
	return cell[1 : len(cell)-1], true
}

func readConfigDoc(tb testing.TB) string {
	tb.Helper()
	b, err := os.ReadFile(configDoc)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// yamlLeaves returns the YAML path of every field under v ("lease.duration",
// "collections[].key") with its value, flattening inline structs as yaml.v3 does.
func yamlLeaves(v reflect.Value, prefix string, out map[string]reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		fv := v.Field(i)
		switch {
		case strings.Contains(opts, "inline"):
			yamlLeaves(fv, prefix, out)
		case f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Time]():
			yamlLeaves(fv, prefix+name+".", out)
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
			yamlLeaves(reflect.New(f.Type.Elem()).Elem(), prefix+name+"[].", out)
		default:
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			out[prefix+name] = fv
		}
	}
}

// TestConfigDocListsEveryField checks the config-file table against SyncerConfig's
// YAML fields, both ways, and each default written as a code span against
// DefaultSyncerConfig.
func TestConfigDocListsEveryField(t *testing.T) {
	rows := docTable(t, readConfigDoc(t), "field", "default", "meaning")
	fields := map[string]reflect.Value{}
	yamlLeaves(reflect.ValueOf(DefaultSyncerConfig()), "", fields)

	var documented []string
	for _, row := range rows {
		name, ok := code(row[0])
		if !ok {
			t.Errorf("config field %q: want the name as one code span", row[0])
			continue
		}
		documented = append(documented, name)
		v, ok := fields[name]
		if !ok {
			continue // reported below
		}
		def, ok := code(row[1])
		if !ok || v.Kind() == reflect.Pointer && v.IsNil() || strings.HasPrefix(name, "collections[]") {
			continue // described in words, or no default of its own
		}
		if err := sameDefault(v, def); err != nil {
			t.Errorf("config field %s: documented default %s, but %v", name, row[1], err)
		}
	}
	var inCode []string
	for name := range fields {
		inCode = append(inCode, name)
	}
	compareNames(t, "config fields", inCode, documented)
}

// sameDefault reports how the default doc, as written in the documentation, differs
// from v.
func sameDefault(v reflect.Value, doc string) error {
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Type() == reflect.TypeFor[time.Duration]() {
		d, err := time.ParseDuration(doc)
		if err != nil {
			return err
		}
		if got := time.Duration(v.Int()); d != got {
			return fmt.Errorf("the code's is %s", got)
		}
		return nil
	}
	var got string
	if m, ok := v.Interface().(encoding.TextMarshaler); ok {
		text, err := m.MarshalText()
		if err != nil {
			return err
		}
		if got = string(text); got != doc {
			return fmt.Errorf("the code's is %q", got)
		}
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		got = v.String()
		if doc == `""` {
			doc = ""
		}
	case reflect.Int, reflect.Int64:
		got = strconv.FormatInt(v.Int(), 10)
	case reflect.Float64:
		got = strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case reflect.Bool:
		got = strconv.FormatBool(v.Bool())
	default:
		return nil
	}
	if doc != got {
		return fmt.Errorf("the code's is %q", got)
	}
	return nil
}

// compareNames fails t with what only the code, or only the documentation, names.
func compareNames(t *testing.T, what string, inCode, documented []string) {
	t.Helper()
	slices.Sort(inCode)
	slices.Sort(documented)
	if d := cmp.Diff(inCode, documented); d != "" {
		t.Errorf("%s in the code (-) and in %s (+) differ:\n%s", what, configDoc, d)
	}
}

// commands returns both binaries' commands by path ("syncer once"), leaving out help
// and the shell-specific completion commands.
func commands() map[string]*cobra.Command {
	out := map[string]*cobra.Command{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Name() == "help" || c.HasParent() && c.Parent().Name() == "completion" {
			return
		}
		out[c.CommandPath()] = c
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	for _, root := range []*cobra.Command{(&Syncer{}).command(), (&MetadataAPI{}).command()} {
		setupCompletion(root, []string{"completion"}) // as when it is asked for
		walk(root)
	}
	return out
}

// TestConfigDocListsEveryCommand checks the commands table against both binaries'
// command trees, both ways.
func TestConfigDocListsEveryCommand(t *testing.T) {
	var documented, inCode []string
	for _, row := range docTable(t, readConfigDoc(t), "command", "what it does") {
		name, _ := code(row[0])
		words := strings.Fields(name)
		for len(words) > 0 && strings.ToUpper(words[len(words)-1]) == words[len(words)-1] {
			words = words[:len(words)-1] // arguments: VERSION, A B
		}
		documented = append(documented, strings.Join(words, " "))
	}
	for path := range commands() {
		inCode = append(inCode, path)
	}
	compareNames(t, "commands", inCode, documented)
}

// TestConfigDocListsEveryFlag checks the flags table against every command's flags
// (a root's persistent flags under the root), both ways, with each flag's variable
// and default.
func TestConfigDocListsEveryFlag(t *testing.T) {
	type flag struct{ env, def string }
	inCode := map[string]flag{}
	for path, c := range commands() {
		fs := c.LocalNonPersistentFlags()
		if !c.HasParent() {
			fs.AddFlagSet(c.PersistentFlags())
		}
		fs.VisitAll(func(f *pflag.Flag) {
			if f.Hidden || f.Name == "help" || f.Name == "version" {
				return
			}
			var env string
			if keys := f.Annotations[envAnnotation]; len(keys) > 0 {
				env = keys[0]
			}
			inCode[path+" --"+f.Name] = flag{env, f.DefValue}
		})
	}
	documented := map[string]flag{}
	for _, row := range docTable(t, readConfigDoc(t), "command", "flag", "env", "default", "meaning") {
		cmdPath, _ := code(row[0])
		name, _ := code(row[1])
		env, _ := code(row[2])
		def, _ := code(row[3])
		documented[cmdPath+" "+name] = flag{env, def}
	}
	var codeNames, docNames []string
	for name, want := range inCode {
		codeNames = append(codeNames, name)
		got, ok := documented[name]
		if !ok {
			continue
		}
		if got.env != want.env {
			t.Errorf("%s: documented variable %q, the code's %q", name, got.env, want.env)
		}
		if !sameFlagDefault(want.def, got.def) {
			t.Errorf("%s: documented default %q, the code's %q", name, got.def, want.def)
		}
	}
	for name := range documented {
		docNames = append(docNames, name)
	}
	compareNames(t, "flags", codeNames, docNames)
}

// sameFlagDefault compares a flag's default with the documented one, durations by
// value ("1m" is "1m0s"), a false boolean and an empty string also by an empty cell.
func sameFlagDefault(inCode, doc string) bool {
	if inCode == doc || inCode == "false" && doc == "" {
		return true
	}
	a, errA := time.ParseDuration(inCode)
	b, errB := time.ParseDuration(doc)
	return errA == nil && errB == nil && a == b
}

// TestConfigDocListsEveryVariable checks the environment table against the package's
// Env constants, both ways; Go's own variables and USER may be documented besides.
func TestConfigDocListsEveryVariable(t *testing.T) {
	goOwn := map[string]bool{"GOGC": true, "GOMEMLIMIT": true, "USER": true}
	var documented []string
	for _, row := range docTable(t, readConfigDoc(t), "variable", "read by", "meaning") {
		name, _ := code(row[0])
		if !goOwn[name] {
			documented = append(documented, name)
		}
	}
	compareNames(t, "environment variables", envConstants(t), documented)
}

// envConstants returns the values of the package's string constants named Env*.
func envConstants(tb testing.TB) []string {
	tb.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			tb.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Env") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					s, err := strconv.Unquote(lit.Value)
					if err != nil {
						tb.Fatal(err)
					}
					out = append(out, s)
				}
			}
			return true
		})
	}
	if len(out) == 0 {
		tb.Fatal("no Env constants found")
	}
	return out
}
