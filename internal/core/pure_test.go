package core

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// pureStd are the standard packages a core may import: values and
// algorithms. time is there for time.Time and time.Duration values; a
// core never reads the clock (forbiddenCalls).
var pureStd = map[string]bool{
	"bytes": true, "cmp": true, "encoding/binary": true, "errors": true,
	"fmt": true, "hash/crc32": true, "hash/fnv": true, "maps": true,
	"math": true, "math/bits": true, "math/rand/v2": true, "slices": true,
	"sort": true, "strconv": true, "strings": true, "time": true,
}

// pureOwn are braid's packages a core may import besides other cores.
var pureOwn = map[string]bool{
	"github.com/braidfs/braid/internal/layout":     true,
	"github.com/braidfs/braid/internal/invariants": true,
}

// forbiddenCalls read a clock, sleep, or draw from a shared random
// source: a core gets `now` and its random source from the caller.
var forbiddenCalls = map[string]map[string]bool{
	"time": {"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true,
		"AfterFunc": true, "NewTimer": true, "NewTicker": true, "Tick": true},
	"rand": {"Int": true, "IntN": true, "Int64": true, "Int64N": true, "Uint32": true,
		"Uint64": true, "Float64": true, "Perm": true, "Shuffle": true, "N": true,
		"Int32": true, "Int32N": true, "Uint64N": true, "Uint32N": true, "UintN": true, "Uint": true},
}

type pkgInfo struct {
	ImportPath string
	Dir        string
	Standard   bool
	Imports    []string
	GoFiles    []string
}

func goTool(t *testing.T) string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// TestCoresArePure fails when a core (or what it imports) reaches the
// store, the network, a goroutine, a channel or the clock.
func TestCoresArePure(t *testing.T) {
	out, err := exec.Command(goTool(t), "list", "-deps", "-json", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	cores := 0
	for dec.More() {
		var p pkgInfo
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Standard {
			continue
		}
		if !strings.HasPrefix(p.ImportPath, "github.com/braidfs/braid/internal/core") && !pureOwn[p.ImportPath] {
			t.Errorf("%s is a dependency of a core: cores import only the standard library's pure packages, internal/layout and other cores", p.ImportPath)
			continue
		}
		cores++
		for _, imp := range p.Imports {
			if !pureStd[imp] && !strings.HasPrefix(imp, "github.com/braidfs/braid/") {
				t.Errorf("%s imports %s: not one of the pure standard packages a core may use", p.ImportPath, imp)
			}
		}
		for _, f := range p.GoFiles {
			checkFile(t, filepath.Join(p.Dir, f))
		}
	}
	if cores < 2 {
		t.Fatalf("found %d core packages: the test looks in the wrong place", cores)
	}
}

// checkFile refuses go statements, channels, select and clock reads.
func checkFile(t *testing.T, path string) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		bad := ""
		switch n := n.(type) {
		case *ast.GoStmt:
			bad = "a goroutine"
		case *ast.ChanType:
			bad = "a channel"
		case *ast.SelectStmt:
			bad = "a select"
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok && forbiddenCalls[id.Name][n.Sel.Name] {
				bad = id.Name + "." + n.Sel.Name
			}
		}
		if bad != "" {
			t.Errorf("%s: %s in a core", fset.Position(n.Pos()), bad)
		}
		return true
	})
}
