package cli

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The binaries, as the environment table's "read by" column names them.
const (
	bySyncer = "syncer"
	byAPI    = "metadata-api"
	byBoth   = "both"
)

// binaryRoots maps the type whose methods are each binary's logic to the binary.
var binaryRoots = map[string]string{"Syncer": bySyncer, "MetadataAPI": byAPI}

// goRuntimeVars are read by the Go runtime of every binary.
var goRuntimeVars = []string{"GOGC", "GOMEMLIMIT"}

// TestConfigDocSaysWhichBinaryReadsEachVariable checks the environment table's "read
// by" column against the code, both ways: a variable is read by a binary when a
// function reachable from that binary's methods (Syncer's or MetadataAPI's) names its
// Env constant or reads it with os.Getenv, or when the binary's main reads it.
func TestConfigDocSaysWhichBinaryReadsEachVariable(t *testing.T) {
	got := map[string]string{}
	for _, row := range docTable(t, readConfigDoc(t), "variable", "read by", "meaning") {
		name, _ := code(row[0])
		got[name] = row[1]
	}
	if d := cmp.Diff(envReaders(t), got); d != "" {
		t.Errorf("which binary reads each variable, by the code (-) and by %s (+):\n%s", configDoc, d)
	}
}

// envReaders returns, for each variable, which binary reads it: "syncer",
// "metadata-api" or "both".
func envReaders(tb testing.TB) map[string]string {
	tb.Helper()
	g := parseCallGraph(tb, ".")
	readers := map[string]map[string]bool{}
	add := func(v, bin string) {
		if readers[v] == nil {
			readers[v] = map[string]bool{}
		}
		readers[v][bin] = true
	}
	for recv, bin := range binaryRoots {
		for v := range g.reachableEnv(recv) {
			add(v, bin)
		}
	}
	for dir, bin := range map[string]string{"../../cmd/syncer": bySyncer, "../../cmd/metadata-api": byAPI} {
		for _, v := range mainGetenv(tb, dir) {
			add(v, bin)
		}
	}
	for _, v := range goRuntimeVars {
		add(v, bySyncer)
		add(v, byAPI)
	}
	out := map[string]string{}
	for v, bins := range readers {
		switch {
		case bins[bySyncer] && bins[byAPI]:
			out[v] = byBoth
		case bins[bySyncer]:
			out[v] = bySyncer
		default:
			out[v] = byAPI
		}
	}
	return out
}

// callGraph is the package's functions by key ("name" or "Recv.name"): the Env
// constants each names and the functions each refers to.
type callGraph struct {
	env     map[string][]string // function → values of the Env constants it names
	refs    map[string][]string // function → functions it calls or refers to
	methods map[string][]string // method name → its keys, for calls through a selector
}

// parseCallGraph builds the call graph of the non-test files in dir. A call through a
// selector (x.m()) may reach every method named m: an over-approximation, except that
// a binary's own type is entered only from its own methods.
func parseCallGraph(tb testing.TB, dir string) callGraph {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		tb.Fatal(err)
	}
	fset := token.NewFileSet()
	var parsed []*ast.File
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			tb.Fatal(err)
		}
		parsed = append(parsed, f)
	}
	envValue := map[string]string{} // constant name → value
	funcs := map[string]bool{}      // top-level function names
	g := callGraph{env: map[string][]string{}, refs: map[string][]string{}, methods: map[string][]string{}}
	for _, f := range parsed {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, s := range d.Specs {
					vs, ok := s.(*ast.ValueSpec)
					if !ok {
						continue
					}
					for i, n := range vs.Names {
						if lit, ok := valueAt(vs, i).(*ast.BasicLit); ok && strings.HasPrefix(n.Name, "Env") && lit.Kind == token.STRING {
							v, err := strconv.Unquote(lit.Value)
							if err != nil {
								tb.Fatal(err)
							}
							envValue[n.Name] = v
						}
					}
				}
			case *ast.FuncDecl:
				if r := recvName(d); r != "" {
					g.methods[d.Name.Name] = append(g.methods[d.Name.Name], r+"."+d.Name.Name)
				} else {
					funcs[d.Name.Name] = true
				}
			}
		}
	}
	for _, f := range parsed {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			recv := recvName(fd)
			key := fd.Name.Name
			if recv != "" {
				key = recv + "." + key
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.SelectorExpr:
					for _, m := range g.methods[n.Sel.Name] {
						owner, _, _ := strings.Cut(m, ".")
						if _, root := binaryRoots[owner]; !root || owner == recv {
							g.refs[key] = append(g.refs[key], m)
						}
					}
				case *ast.CallExpr:
					if v, ok := getenvLiteral(n); ok {
						g.env[key] = append(g.env[key], v)
					}
				case *ast.Ident:
					if v, ok := envValue[n.Name]; ok {
						g.env[key] = append(g.env[key], v)
					}
					if funcs[n.Name] {
						g.refs[key] = append(g.refs[key], n.Name)
					}
				}
				return true
			})
		}
	}
	if len(envValue) == 0 {
		tb.Fatal("no Env constants found")
	}
	return g
}

// valueAt returns the i-th value of vs, or nil.
func valueAt(vs *ast.ValueSpec, i int) ast.Expr {
	if i < len(vs.Values) {
		return vs.Values[i]
	}
	return nil
}

// recvName returns the name of fd's receiver type, or "" for a function.
func recvName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// reachableEnv returns the variables named by the functions reachable from the
// methods of the type recv.
func (g callGraph) reachableEnv(recv string) map[string]bool {
	seen := map[string]bool{}
	var todo []string
	for _, ms := range g.methods {
		for _, m := range ms {
			if strings.HasPrefix(m, recv+".") {
				todo = append(todo, m)
			}
		}
	}
	out := map[string]bool{}
	for len(todo) > 0 {
		k := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[k] {
			continue
		}
		seen[k] = true
		for _, v := range g.env[k] {
			out[v] = true
		}
		todo = append(todo, g.refs[k]...)
	}
	return out
}

// mainGetenv returns the variables a main package in dir reads with os.Getenv or
// os.LookupEnv by literal name.
func mainGetenv(tb testing.TB, dir string) []string {
	tb.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, "main.go"), nil, 0)
	if err != nil {
		tb.Fatal(err)
	}
	found := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if v, ok := getenvLiteral(call); ok {
				found[v] = true
			}
		}
		return true
	})
	return slices.Sorted(maps.Keys(found))
}

// getenvLiteral returns the variable call reads when it is os.Getenv or os.LookupEnv
// of a literal name.
func getenvLiteral(call *ast.CallExpr) (string, bool) {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || len(call.Args) != 1 || (sel.Sel.Name != "Getenv" && sel.Sel.Name != "LookupEnv") {
		return "", false
	}
	if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "os" {
		return "", false
	}
	lit, ok := call.Args[0].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	v, err := strconv.Unquote(lit.Value)
	return v, err == nil
}
