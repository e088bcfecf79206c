package layers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// leaks lists, for the Go files under dir (one package, tests excluded),
// every exported declaration that names a type a user cannot name: a type
// of an internal package (pkg.Name where pkg is imported from a path with
// an internal element; go doc would show the internal path), or one of the
// package's own unexported types in a signature or an exported field. It
// looks at the types written in signatures, exported fields, aliases and
// variable types, and at variables' initialisers for internal names.
func leaks(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	names, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	files := map[string]*ast.File{}
	hidden := map[string]bool{} // the package's unexported types
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok {
				for _, s := range g.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok && !ts.Name.IsExported() {
						hidden[ts.Name.Name] = true
					}
				}
			}
		}
	}
	var out []string
	for _, name := range names {
		f := files[name]
		if f == nil {
			continue
		}
		internal := map[string]string{}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !strings.Contains("/"+path+"/", "/internal/") {
				continue
			}
			local := path[strings.LastIndex(path, "/")+1:]
			if imp.Name != nil {
				local = imp.Name.Name
			}
			internal[local] = path
		}
		// report walks the types in n; a field's names are not types.
		var report func(what string, n ast.Node)
		report = func(what string, n ast.Node) {
			ast.Inspect(n, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.Field:
					report(what, n.Type)
					return false
				case *ast.SelectorExpr:
					if id, ok := n.X.(*ast.Ident); ok && internal[id.Name] != "" {
						out = append(out, filepath.Base(name)+": "+what+" names "+internal[id.Name]+"."+n.Sel.Name)
					}
					return false
				case *ast.Ident:
					if hidden[n.Name] {
						out = append(out, filepath.Base(name)+": "+what+" names the unexported type "+n.Name)
					}
				case *ast.CallExpr, *ast.FuncLit, *ast.CompositeLit:
					// an initialiser: only its internal names count
					ast.Inspect(n, func(n ast.Node) bool {
						if sel, ok := n.(*ast.SelectorExpr); ok {
							if id, ok := sel.X.(*ast.Ident); ok && internal[id.Name] != "" {
								out = append(out, filepath.Base(name)+": "+what+" names "+internal[id.Name]+"."+sel.Sel.Name)
							}
						}
						return true
					})
					return false
				}
				return true
			})
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() || (d.Recv != nil && !exportedRecv(d.Recv)) {
					continue
				}
				report("func "+d.Name.Name, d.Type)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							report("type "+s.Name.Name, exportedParts(s.Type))
						}
					case *ast.ValueSpec:
						for i, n := range s.Names {
							if !n.IsExported() {
								continue
							}
							if s.Type != nil {
								report(n.Name, s.Type)
							}
							if i < len(s.Values) {
								report(n.Name, s.Values[i])
							}
						}
					}
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// exportedRecv reports whether a method's receiver type is exported.
func exportedRecv(r *ast.FieldList) bool {
	if len(r.List) == 0 {
		return false
	}
	x := r.List[0].Type
	if s, ok := x.(*ast.StarExpr); ok {
		x = s.X
	}
	if g, ok := x.(*ast.IndexExpr); ok {
		x = g.X
	}
	id, ok := x.(*ast.Ident)
	return ok && id.IsExported()
}

// exportedParts keeps what go doc shows of a type: a struct's exported
// fields and an interface's methods (unexported ones are elided).
func exportedParts(x ast.Expr) ast.Node {
	st, ok := x.(*ast.StructType)
	if !ok {
		return x
	}
	var keep []*ast.Field
	for _, f := range st.Fields.List {
		exported := len(f.Names) == 0 // embedded: shown
		for _, n := range f.Names {
			exported = exported || n.IsExported()
		}
		if exported {
			keep = append(keep, f)
		}
	}
	return &ast.StructType{Fields: &ast.FieldList{List: keep}}
}

// TestPublicAPINamesNoInternalPackage checks every public package (the
// root, tensor, quant, model, ...; not internal/ and not the commands)
// for exported declarations that name an internal package, or a type of
// their own that a user cannot name (see leaks).
func TestPublicAPINamesNoInternalPackage(t *testing.T) {
	root := moduleRoot(t)
	var dirs []string
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		name := d.Name()
		if path != root && (name == "internal" || name == "cmd" || name == "testdata" || name == "examples" || strings.HasPrefix(name, ".") || rel == "internal") {
			return filepath.SkipDir
		}
		dirs = append(dirs, path)
		return nil
	})
	checked := 0
	for _, dir := range dirs {
		if m, _ := filepath.Glob(filepath.Join(dir, "*.go")); len(m) == 0 {
			continue
		}
		checked++
		rel, _ := filepath.Rel(root, dir)
		for _, l := range leaks(t, dir) {
			t.Errorf("%s/%s", rel, l)
		}
	}
	if checked < 8 {
		t.Fatalf("checked %d public packages; the walk is broken", checked)
	}
}

// TestLeaksCatchesInternalType makes sure the check can fail: a package
// that re-exports an internal type is reported.
func TestLeaksCatchesInternalType(t *testing.T) {
	dir := t.TempDir()
	src := `package p

import (
	"example.com/m/internal/x"
	y "example.com/m/internal/z"
)

type A = x.T
type B struct {
	Exported y.U
	hidden   x.V
}
func F() x.W { return nil }
func (B) M(v y.Q) {}
func (b *B) m(v y.R) {}
var E = x.Err
var e = x.Err

type hidden struct{}
type C struct {
	Field  *hidden
	field  hidden
}
func G(hidden int) []hidden { return nil }
func g() hidden { return hidden{} }
var V = hidden{}
`
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(leaks(t, dir), "\n")
	for _, want := range []string{"type A names example.com/m/internal/x.T", "type B names example.com/m/internal/z.U", "func F names example.com/m/internal/x.W", "func M names example.com/m/internal/z.Q", "E names example.com/m/internal/x.Err",
		"type C names the unexported type hidden", "func G names the unexported type hidden"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "func G names"); n != 1 {
		t.Errorf("func G reported %d times, want once (its parameter's name is not a type):\n%s", n, got)
	}
	for _, not := range []string{"x.V", "z.R", "e names", "func g", "V names"} {
		if strings.Contains(got, not) {
			t.Errorf("reported unexported %q:\n%s", not, got)
		}
	}
}
