package layers

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// edge is one import of one file.
type edge struct {
	file     string
	from, to string
	test     bool
}

// imports parses the import clause of every Go file of the module under
// root (not the separate asmgen module, not testdata), with each file's
// package path.
func imports(t *testing.T, root string) []edge {
	t.Helper()
	var out []edge
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || name == "asmgen") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := Module
		if rel != "." {
			pkg += "/" + filepath.ToSlash(rel)
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			to, _ := strconv.Unquote(imp.Path.Value)
			out = append(out, edge{file: path, from: pkg, to: to, test: strings.HasSuffix(path, "_test.go")})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// violations returns the imports that run up the layers: a package's code
// importing a higher layer, or a test importing a higher layer other than
// the test support (internal/testkit) and what it builds on
// (internal/app/synth writes the synthetic checkpoints the tests use).
func violations(t *testing.T, es []edge) []string {
	t.Helper()
	var bad []string
	for _, e := range es {
		to, ok := Of(e.to)
		if !ok {
			if strings.HasPrefix(e.to, Module+"/") || e.to == Module {
				bad = append(bad, e.file+": imports "+e.to+", which no layer holds (add it to layers.Table)")
			}
			continue
		}
		from, ok := Of(e.from)
		if !ok {
			bad = append(bad, e.file+": package "+e.from+" is in no layer (add it to layers.Table)")
			continue
		}
		if to.Rank <= from.Rank {
			continue
		}
		if e.test && (strings.HasPrefix(e.to, Module+"/internal/testkit") || e.to == Module+"/internal/app/synth") {
			continue
		}
		bad = append(bad, e.file+": "+e.from+" (layer "+strconv.Itoa(from.Rank)+") imports "+e.to+" (layer "+strconv.Itoa(to.Rank)+")")
	}
	return bad
}

func moduleRoot(t *testing.T) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// TestLayering fails on any import that runs up the layers.
func TestLayering(t *testing.T) {
	es := imports(t, moduleRoot(t))
	if len(es) < 500 {
		t.Fatalf("found only %d imports: is the module root right?", len(es))
	}
	for _, v := range violations(t, es) {
		t.Error(v)
	}
}

// TestLayeringCatchesBackEdge plants a back edge, the model importing the
// engine, in a copy of a file and checks that the check sees it.
func TestLayeringCatchesBackEdge(t *testing.T) {
	dir := t.TempDir()
	src := `package model

import _ "github.com/k3go/k3/internal/engine"
`
	if err := os.MkdirAll(filepath.Join(dir, "model"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model", "bad.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := violations(t, imports(t, dir))
	if len(bad) != 1 || !strings.Contains(bad[0], "imports "+Module+"/internal/engine (layer 3)") {
		t.Fatalf("a model package importing the engine: %q", bad)
	}
}

// TestOf checks the prefix rules on a few paths.
func TestOf(t *testing.T) {
	for path, want := range map[string]int{
		Module: 4, Module + "/model": 2, Module + "/internal/engine/trunk": 3, Module + "/internal/platform/kernel/gemm": 0,
		Module + "/cmd/k3": 7, Module + "/iox/ioxtest": 1, Module + "/internal/app/server": 5,
		Module + "/internal/testkit/benchdata": 5, Module + "/internal/testkit/fixtures": 6,
	} {
		if l, ok := Of(path); !ok || l.Rank != want {
			t.Errorf("Of(%s) = %d %v, want %d", path, l.Rank, ok, want)
		}
	}
	for _, path := range []string{"fmt", Module + "x/y", "github.com/other/k3"} {
		if _, ok := Of(path); ok {
			t.Errorf("Of(%s) found a layer", path)
		}
	}
}
