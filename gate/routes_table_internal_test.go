package gate

import (
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
)

// allMethods are the methods the table tests try on every row: the
// standard ones, a lower-case one (methods are case sensitive) and an
// extension method.
var allMethods = []string{"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "post", "PROPFIND"}

// TestRoutePolicyTable walks the route table itself: every class has a row;
// classifyRoute serves exactly the row's methods on a path of the class
// (405 for the others), and for DataResource paths exactly dataOperations;
// the key, token, body and door rules of each row hold together.
func TestRoutePolicyTable(t *testing.T) {
	if len(routePolicies) != len(classNames) {
		t.Fatalf("%d rows for %d classes", len(routePolicies), len(classNames))
	}
	samples := map[routeClass]string{
		classOther: "/docs", classPublic: "/.well-known/health", classController: "/a2a",
		classEvents: "/a2a/events", classLegacy: "/api/supervaizer/x",
	}
	for c := range routePolicies {
		class := routeClass(c)
		p := &routePolicies[c]
		if path, ok := samples[class]; ok {
			for _, m := range allMethods {
				got := classifyRoute(m, path)
				want := 0
				if p.methods != nil && !slices.Contains(p.methods, m) {
					want = http.StatusMethodNotAllowed
				}
				if got.class != class || got.status != want {
					t.Errorf("%s %s: %s %d, want %s %d", m, path, got.class, got.status, class, want)
				}
			}
		} else if p.answer != nil {
			if path := opsPath(class); path == "" {
				t.Errorf("ops class %s: no path in opsRoutes", class)
			}
		} else if class != classData {
			t.Errorf("class %s: no sample path", class)
		}
		if (p.key == keyNone) != (p.door == doorOpen) {
			t.Errorf("%s: key rule %d with door %d: a class without a key is an open door", class, p.key, p.door)
		}
		if p.body == bodyReadA2A && class != classController {
			t.Errorf("%s: body read whole, but only serveController reads a body", class)
		}
		if (p.answer != nil) != (p.body == bodyNone) || (p.answer != nil && p.serve != nil) {
			t.Errorf("%s: the sidecar's own endpoints, and only they, answer without the body and without next", class)
		}
		for _, m := range allMethods {
			s := p.key.scope(m)
			want := map[keyRule]string{keyNone: "", keyRead: "read", keyWrite: "write"}[p.key]
			if p.key == keyReadIfGet {
				want = "write"
				if m == "GET" || m == "HEAD" {
					want = "read"
				}
			}
			if s != want {
				t.Errorf("%s %s: key scope %q, want %q", class, m, s, want)
			}
		}
	}

	const d = "/api/agents/a/data/contacts"
	shapes := map[dataShape][]string{
		dataCollection: {d, d + "/"}, dataItem: {d + "/1", d + "/1/"},
		dataImport: {d + "/import/"}, dataImportOrItem: {d + "/import"},
	}
	if len(shapes) != len(dataOperations) {
		t.Fatalf("%d shapes tested of %d", len(shapes), len(dataOperations))
	}
	for shape, paths := range shapes {
		for _, path := range paths {
			for _, m := range allMethods {
				got := classifyRoute(m, path)
				op, ok := dataOperations[shape][m]
				want := 0
				if !ok {
					want = http.StatusMethodNotAllowed
				}
				if got.class != classData || got.status != want || got.operation != op || got.resource != "contacts" {
					t.Errorf("%s %s: %s %d op %q, want data %d op %q", m, path, got.class, got.status, got.operation, want, op)
				}
			}
		}
	}
}

// TestRouteDoors: each door under each setting of other_routes and
// legacy_routes.
func TestRouteDoors(t *testing.T) {
	cases := []struct {
		door   doorRule
		other  OtherPolicy
		legacy bool
		want   admission
	}{
		{doorKey, OtherDeny, false, admitKey},
		{doorOpen, OtherDeny, false, admitOpen},
		{doorOtherRoutes, OtherDeny, true, admitClosed},
		{doorOtherRoutes, OtherAPIKey, false, admitKey},
		{doorOtherRoutes, OtherPublic, false, admitOpen},
		{doorLegacyRoutes, OtherPublic, false, admitClosed},
		{doorLegacyRoutes, OtherDeny, true, admitKey},
	}
	for _, c := range cases {
		g := &Gate{otherRoutes: c.other, legacyAllowed: c.legacy}
		if got := g.admit(c.door); got != c.want {
			t.Errorf("door %d, other_routes %d, legacy %v: %d, want %d", c.door, c.other, c.legacy, got, c.want)
		}
	}
}

// TestRouteTableMatchesDocs: the methods, key scope and body ("(400)": a
// GET or HEAD takes none) columns of
// docs/architecture.md's route table say what routePolicies does.
func TestRouteTableMatchesDocs(t *testing.T) {
	b, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	keyWords := map[keyRule]string{keyNone: "none", keyRead: "read", keyWrite: "write", keyReadIfGet: "read for GET/HEAD, else write"}
	seen := 0
	for _, line := range strings.Split(string(b), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 8 {
			continue
		}
		class := slices.Index(classNames[:], strings.TrimSpace(cells[1]))
		if class < 0 {
			continue
		}
		seen++
		p := &routePolicies[class]
		methods := strings.TrimSpace(cells[3])
		switch {
		case p.methods != nil:
			if methods != strings.Join(p.methods, ", ") {
				t.Errorf("%s: docs say methods %q, table %v", classNames[class], methods, p.methods)
			}
		case routeClass(class) == classData:
			if !strings.HasPrefix(methods, "by operation") {
				t.Errorf("data: docs say methods %q, table: by operation", methods)
			}
		case methods != "any":
			t.Errorf("%s: docs say methods %q, table: any", classNames[class], methods)
		}
		if k := strings.TrimSpace(cells[4]); k != keyWords[p.key] {
			t.Errorf("%s: docs say key %q, table %q", classNames[class], k, keyWords[p.key])
		}
		// No class takes a body on GET or HEAD (bodyOnRead): every row
		// that serves a read says so.
		if body := cells[6]; (p.methods == nil || slices.ContainsFunc(p.methods, isRead)) != strings.Contains(body, "(400)") {
			t.Errorf("%s: docs say body %q; GET and HEAD with a body are 400 on every class serving them", classNames[class], strings.TrimSpace(body))
		}
	}
	if seen != len(classNames) {
		t.Errorf("docs/architecture.md's route table has %d of %d classes", seen, len(classNames))
	}
}

// opsPath is the path of an ops class in opsRoutes, or "".
func opsPath(class routeClass) string {
	for path, c := range opsRoutes {
		if c == class {
			return path
		}
	}
	return ""
}
