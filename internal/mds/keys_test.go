package mds

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeysSpelledOnlyInKeysGo: no file of the MDS but keys.go spells a
// store key's prefix (a []byte of a character, or of a string such as
// "s/..." or "S3u/"), so the key space is read in one place.
func TestKeysSpelledOnlyInKeysGo(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if name == "keys.go" || strings.HasSuffix(name, "_test.go") {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				if isByteSlice(n.Type) && len(n.Elts) > 0 {
					if lit, ok := n.Elts[0].(*ast.BasicLit); ok && lit.Kind == token.CHAR {
						t.Errorf("%s: a key prefix spelled outside keys.go: []byte{%s, ...}", fset.Position(n.Pos()), lit.Value)
					}
				}
			case *ast.CallExpr:
				if isByteSlice(n.Fun) && len(n.Args) == 1 {
					if lit, ok := n.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING && looksLikeKey(lit.Value) {
						t.Errorf("%s: a key spelled outside keys.go: []byte(%s)", fset.Position(n.Pos()), lit.Value)
					}
				}
			}
			return true
		})
	}
	if checked < 20 {
		t.Fatalf("checked %d files: the test looks in the wrong place", checked)
	}
}

func isByteSlice(e ast.Expr) bool {
	a, ok := e.(*ast.ArrayType)
	if !ok || a.Len != nil {
		return false
	}
	id, ok := a.Elt.(*ast.Ident)
	return ok && id.Name == "byte"
}

// looksLikeKey: a quoted string of the store's key forms.
func looksLikeKey(quoted string) bool {
	s := strings.Trim(quoted, "\"`")
	return strings.HasPrefix(s, "s/") || strings.HasPrefix(s, "S3") || strings.HasPrefix(s, "O/")
}
