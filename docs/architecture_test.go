package docs

// The tests that keep architecture.md's "Request order" the order of
// (*Gate).Serve (gate/serve.go), and every function it names where it says
// it is.

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// docStep is one numbered step of architecture.md's "Request order".
type docStep struct {
	n     int
	title string
	fn    string // the first function the step names
	text  string
}

var (
	docStepLine = regexp.MustCompile(`^(\d+)\. \*\*(.+?)\*\*(.*)$`)
	// serveStepComment is a numbered step comment in Serve: "// 4. Route class."
	serveStepComment = regexp.MustCompile(`^//\s*(\d+)\.\s+([^.:]+)`)
	// namedInFile is a name followed by the file that holds it: (`name`, `dir/file.go`.
	namedInFile = regexp.MustCompile("`([A-Za-z_][A-Za-z0-9_.]*)`,\\s+`([a-z0-9_/]+\\.go)`")
)

// requestOrder returns the numbered steps of architecture.md's "Request
// order" section.
func requestOrder(t *testing.T) []docStep {
	t.Helper()
	section := archSection(t, "Request order")
	var steps []docStep
	for _, line := range strings.Split(section, "\n") {
		if m := docStepLine.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			steps = append(steps, docStep{n: n, title: m[2]})
		}
		if len(steps) > 0 {
			steps[len(steps)-1].text += line + "\n"
		}
	}
	for i := range steps {
		if m := namedInFile.FindStringSubmatch(steps[i].text); m != nil {
			steps[i].fn = m[1]
		}
	}
	return steps
}

// archSection returns the text of architecture.md's "## heading" section.
func archSection(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## "+heading+"\n")
	if !ok {
		t.Fatalf("architecture.md has no %q section", "## "+heading)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	return section
}

// serveFunc parses gate/serve.go and returns it with (*Gate).Serve.
// serveFuncs are Serve and the function of its steps, serveSteps, both
// in gate/serve.go: the steps are numbered across the two.
func serveFuncs(t *testing.T) (*ast.File, []*ast.FuncDecl) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../gate/serve.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var fns []*ast.FuncDecl
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil && (fd.Name.Name == "Serve" || fd.Name.Name == "serveSteps") {
			fns = append(fns, fd)
		}
	}
	if len(fns) != 2 {
		t.Fatal("gate/serve.go declares no (*Gate).Serve and (*Gate).serveSteps")
	}
	return f, fns
}

func normTitle(s string) string {
	return strings.ToLower(strings.TrimRight(strings.TrimSpace(s), ".:"))
}

// TestRequestOrderFollowsServe: architecture.md's numbered steps are the
// numbered step comments of Serve and serveSteps, the same numbers with the
// same titles, and the function each step names first is called there.
func TestRequestOrderFollowsServe(t *testing.T) {
	steps := requestOrder(t)
	if len(steps) < 5 {
		t.Fatalf("architecture.md's Request order has %d steps", len(steps))
	}
	f, fns := serveFuncs(t)
	inServe := map[int]string{}
	called := map[string]bool{}
	for _, serve := range fns {
		for _, cg := range f.Comments {
			if cg.Pos() < serve.Body.Lbrace || cg.End() > serve.Body.Rbrace {
				continue
			}
			for _, c := range cg.List {
				if m := serveStepComment.FindStringSubmatch(c.Text); m != nil {
					n, _ := strconv.Atoi(m[1])
					if prev, dup := inServe[n]; dup {
						t.Errorf("Serve numbers two steps %d (%q, %q)", n, prev, m[2])
					}
					inServe[n] = m[2]
				}
			}
		}
		ast.Inspect(serve.Body, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.Ident:
				called[x.Name] = true
			case *ast.SelectorExpr:
				called[x.Sel.Name] = true
			}
			return true
		})
	}
	for i, s := range steps {
		if s.n != i+1 {
			t.Errorf("architecture.md's step %q is numbered %d, want %d", s.title, s.n, i+1)
		}
		got, ok := inServe[s.n]
		switch {
		case !ok:
			t.Errorf("architecture.md's step %d (%s) has no \"// %d.\" comment in Serve", s.n, s.title, s.n)
		case normTitle(got) != normTitle(s.title):
			t.Errorf("step %d: Serve calls it %q, architecture.md %q", s.n, got, s.title)
		}
		name := s.fn[strings.LastIndex(s.fn, ".")+1:]
		if s.fn == "" || !called[name] {
			t.Errorf("step %d (%s): architecture.md names %q first, which Serve does not call", s.n, s.title, s.fn)
		}
	}
	if len(inServe) != len(steps) {
		t.Errorf("Serve has %d numbered steps, architecture.md %d", len(inServe), len(steps))
	}
}

// TestArchitectureNamesAreWhereItSays: every "`name`, `dir/file.go`" of
// architecture.md names something that file declares (a function, a method
// as Type.Method, a type, a variable or a constant; a name may carry its
// package's name), so the page cannot keep a step the code has moved.
func TestArchitectureNamesAreWhereItSays(t *testing.T) {
	b, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	pairs := namedInFile.FindAllStringSubmatch(string(b), -1)
	checked := 0
	decls := map[string]map[string]bool{}
	for _, m := range pairs {
		name, file := m[1], m[2]
		if strings.HasSuffix(name, ".go") || !strings.Contains(file, "/") {
			continue // a list of files, not a name and its file
		}
		if decls[file] == nil {
			decls[file] = declaredIn(t, "../"+file)
		}
		dir := file[:strings.LastIndex(file, "/")]
		pkg := dir[strings.LastIndex(dir, "/")+1:]
		name = strings.TrimPrefix(name, pkg+".")
		if !decls[file][name] {
			t.Errorf("architecture.md names `%s` in %s, which does not declare it", m[1], file)
		}
		checked++
	}
	if checked < 15 {
		t.Errorf("only %d names checked: has architecture.md changed its citation form?", checked)
	}
}

// declaredIn returns the top-level names of a Go file: functions, methods
// as Recv.Name, types, variables and constants.
func declaredIn(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Errorf("architecture.md cites %s: %v", strings.TrimPrefix(path, "../"), err)
		return map[string]bool{}
	}
	names := map[string]bool{}
	for _, d := range f.Decls {
		switch x := d.(type) {
		case *ast.FuncDecl:
			if x.Recv == nil || len(x.Recv.List) == 0 {
				names[x.Name.Name] = true
				continue
			}
			recv := x.Recv.List[0].Type
			if st, ok := recv.(*ast.StarExpr); ok {
				recv = st.X
			}
			if ix, ok := recv.(*ast.IndexExpr); ok {
				recv = ix.X
			}
			if id, ok := recv.(*ast.Ident); ok {
				names[id.Name+"."+x.Name.Name] = true
			}
			names[x.Name.Name] = true // a method may be cited without its type
		case *ast.GenDecl:
			for _, s := range x.Specs {
				switch sp := s.(type) {
				case *ast.TypeSpec:
					names[sp.Name.Name] = true
				case *ast.ValueSpec:
					for _, n := range sp.Names {
						names[n.Name] = true
					}
				}
			}
		}
	}
	return names
}

// TestJobStartWalk: the steps "One job.start, step by step" lists under
// serveController are the functions serveController calls, in the order
// it first calls them.
func TestJobStartWalk(t *testing.T) {
	section := archSection(t, "One job.start, step by step")
	sub := regexp.MustCompile("(?m)^   \\d+\\. `([A-Za-z_.]+)`")
	var listed []string
	for _, m := range sub.FindAllStringSubmatch(section, -1) {
		listed = append(listed, m[1])
	}
	if len(listed) < 3 {
		t.Fatalf("only %d steps listed under serveController", len(listed))
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../gate/controller.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var bodies []*ast.BlockStmt
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "controllerSteps" {
			bodies = append(bodies, fd.Body)
		}
	}
	if len(bodies) == 0 {
		t.Fatal("gate/controller.go declares no controllerSteps")
	}
	var calls []string
	seen := map[string]bool{}
	ast.Inspect(bodies[0], func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok {
			name := ""
			switch fn := c.Fun.(type) {
			case *ast.Ident:
				name = fn.Name
			case *ast.SelectorExpr:
				name = fn.Sel.Name
			}
			if name != "" && !seen[name] {
				seen[name] = true
				calls = append(calls, name)
			}
		}
		return true
	})
	// Every step controllerSteps takes (a method of the gate) is named in
	// the section.
	ast.Inspect(bodies[0], func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok {
			if sel, ok := c.Fun.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "g" && !strings.Contains(section, "`"+sel.Sel.Name+"`") {
					t.Errorf("controllerSteps calls g.%s, which architecture.md's walk does not name", sel.Sel.Name)
				}
			}
		}
		return true
	})
	at := 0
	for _, want := range listed {
		for at < len(calls) && calls[at] != want {
			at++
		}
		if at == len(calls) {
			t.Fatalf("architecture.md lists %s under serveController, whose controllerSteps does not call it after the steps before it (its calls: %v)", want, calls)
		}
	}
}
