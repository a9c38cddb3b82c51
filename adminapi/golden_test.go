package adminapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow/adminapi"
)

// The golden bodies in ../admin/testdata/admin-golden are the server's answers to
// its golden script (admin/golden_test.go, -update writes them),
// normalised there: secrets, hints and
// ids as <secret>, llmf-<hint>…, key_<n>; RFC 3339 times as <time>.
// TestGolden decodes every JSON body into the type of its route and
// encodes it again: the bytes must be the golden file's. A body no route
// below claims fails the test, so a new route needs its type here.

// codec decodes a body into a T and encodes it again.
func codec[T any]() func([]byte) ([]byte, error) {
	return func(b []byte) ([]byte, error) {
		var v T
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields() // a field the type lacks is a contract gap
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out, err := json.Marshal(v)
		return append(out, '\n'), err
	}
}

// goldenRoutes maps "METHOD path" (normalised, without the query) of a
// successful call to the type of its answer.
var goldenRoutes = []struct {
	method, path string
	codec        func([]byte) ([]byte, error)
}{
	{"GET", `/admin/whoami`, codec[adminapi.Whoami]()},
	{"GET", `/admin/users`, codec[adminapi.List[adminapi.User]]()},
	{"POST", `/admin/users`, codec[adminapi.User]()},
	{"DELETE", `/admin/users/[^/]+`, codec[adminapi.User]()},
	{"GET", `/admin/users/[^/]+/tokens`, codec[adminapi.List[adminapi.Token]]()},
	{"POST", `/admin/users/[^/]+/tokens`, codec[adminapi.Token]()},
	{"DELETE", `/admin/users/[^/]+/tokens/[^/]+`, codec[adminapi.Token]()},
	{"(GET|PUT|DELETE)", `/admin/users/[^/]+/roles`, codec[adminapi.List[adminapi.Grant]]()},
	{"GET", `/admin/(orgs|teams|teams/[^/]+/projects)`, codec[adminapi.List[adminapi.Account]]()},
	{"POST", `/admin/(orgs|teams|teams/[^/]+/projects)`, codec[adminapi.Account]()},
	{"PUT", `/admin/(orgs|teams|teams/[^/]+/projects)/[^/]+/share`, codec[adminapi.Account]()},
	{"DELETE", `/admin/(orgs|teams|teams/[^/]+/projects)/[^/]+`, codec[adminapi.AccountDisabled]()},
	{"POST", `/admin/(orgs|teams|teams/[^/]+/projects)/[^/]+/enable`, codec[adminapi.AccountEnabled]()},
	{"(GET|PUT)", `/admin/teams/[^/]+/models`, codec[adminapi.TeamModels]()},
	{"GET", `/admin/keys`, codec[adminapi.List[adminapi.Key]]()},
	{"POST", `/admin/keys`, codec[adminapi.Key]()},
	{"DELETE", `/admin/keys/[^/]+`, codec[adminapi.Key]()},
	{"PUT", `/admin/keys/[^/]+/(limits|active)`, codec[adminapi.Key]()},
	{"GET", `/admin/budgets`, codec[adminapi.List[adminapi.Budget]]()},
	{"PUT", `/admin/budgets`, codec[adminapi.Budget]()},
	{"POST", `/admin/budgets/increase`, codec[adminapi.Budget]()},
	{"DELETE", `/admin/budgets`, codec[adminapi.BudgetDeleted]()},
	{"GET", `/admin/(upstreams|models/[^/]+/upstreams)`, codec[adminapi.List[adminapi.Upstream]]()},
	{"(POST|PUT|DELETE)", `/admin/models/[^/]+/upstreams(/[^/]+)?`, codec[adminapi.Upstream]()},
	{"GET", `/admin/aliases`, codec[adminapi.List[adminapi.Alias]]()},
	{"(PUT|DELETE)", `/admin/aliases/.+`, codec[adminapi.Alias]()},
	{"GET", `/admin/fairshare`, codec[adminapi.FairshareReport]()},
	{"GET", `/admin/sync`, codec[adminapi.List[adminapi.SyncRun]]()},
	{"GET", `/admin/spend`, codec[adminapi.SpendReport]()},
	{"GET", `/admin/audit`, auditCodec},
}

// auditBodies are the types of the audit trail's before and after, by
// action.
var auditBodies = map[string]func([]byte) ([]byte, error){
	"key.create": codec[adminapi.Key](), "key.revoke": codec[adminapi.Key](),
	"key.limits": codec[adminapi.Limits](), "key.active": codec[adminapi.ActiveRequest](),
	"user.create": codec[adminapi.User](), "user.disable": codec[adminapi.User](),
	"token.create": codec[adminapi.Token](), "token.revoke": codec[adminapi.Token](),
	"role.grant": codec[adminapi.RoleChange](), "role.revoke": codec[adminapi.RoleChange](),
	"team.models":     codec[adminapi.TeamModels](),
	"upstream.create": codec[adminapi.Upstream](), "upstream.update": codec[adminapi.Upstream](), "upstream.delete": codec[adminapi.Upstream](),
	"alias.create": codec[adminapi.Alias](), "alias.update": codec[adminapi.Alias](), "alias.delete": codec[adminapi.Alias](),
	"budget.set": codec[adminapi.BudgetSetting](), "budget.delete": codec[adminapi.BudgetSetting](),
	"budget.increase": codec[adminapi.BudgetIncrease](),
}

func init() {
	for _, kind := range []string{"org", "team", "project"} {
		auditBodies[kind+".create"] = codec[adminapi.Account]()
		auditBodies[kind+".enable"] = codec[adminapi.Account]()
		auditBodies[kind+".share"] = codec[adminapi.Account]()
		auditBodies[kind+".disable"] = func(b []byte) ([]byte, error) {
			if bytes.HasPrefix(b, []byte(`{"account":`)) { // after: with the keys revoked
				return codec[adminapi.AccountDisabled]()(b)
			}
			return codec[adminapi.Account]()(b)
		}
	}
}

// auditCodec is the listing's codec, which also checks each entry's
// before and after against the type its action records.
func auditCodec(b []byte) ([]byte, error) {
	var l adminapi.List[adminapi.AuditEntry]
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, err
	}
	for _, e := range l.Data {
		for _, raw := range []json.RawMessage{e.Before, e.After} {
			if raw == nil {
				continue
			}
			c, ok := auditBodies[e.Action]
			if !ok {
				return nil, fmt.Errorf("audit action %s: no type for its bodies", e.Action)
			}
			got, err := c(raw)
			if err != nil {
				return nil, fmt.Errorf("audit %s: %v", e.Action, err)
			}
			if got = bytes.TrimSuffix(got, []byte("\n")); !bytes.Equal(got, raw) {
				return nil, fmt.Errorf("audit %s body differs:\n got: %s\nwant: %s", e.Action, got, raw)
			}
		}
	}
	return codec[adminapi.List[adminapi.AuditEntry]]()(b)
}

// routeOf is the index in goldenRoutes of the route of method and path
// (without the query), -1 for none.
func routeOf(method, path string) int {
	for i, r := range goldenRoutes {
		if regexp.MustCompile(`^`+r.method+`$`).MatchString(method) && regexp.MustCompile(`^`+r.path+`$`).MatchString(path) {
			return i
		}
	}
	return -1
}

// goldenCalls calls f with the method, path (without the query), status,
// content type and file of every call of calls.txt.
func goldenCalls(t *testing.T, f func(method, path, status, ctype, file string)) {
	t.Helper()
	file, err := os.Open(filepath.Join(goldenDir, "calls.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	var method, path string
	for sc.Scan() {
		line := sc.Text()
		if m := goldenCall.FindStringSubmatch(line); m != nil {
			method, path = m[2], m[3]
			path, _, _ = strings.Cut(path, "?")
			continue
		}
		if m := goldenAns.FindStringSubmatch(line); m != nil {
			f(method, path, m[1], m[2], m[3])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

var (
	goldenCall = regexp.MustCompile(`^(\d{3}) (\S+) (\S+) as `)
	goldenAns  = regexp.MustCompile(`^    → (\d{3}) (\S*).* (\d{3}\.\w+)$`)
	rfc3339    = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
)

// denormalise makes a golden body decodable: <time> becomes a time, the
// other placeholders' angle brackets (which an encoder escapes) other
// characters. renormalise undoes it.
func denormalise(s string) string {
	s = strings.ReplaceAll(s, "<time>", "2026-11-30T03:04:05Z")
	return strings.NewReplacer("<", "⟨", ">", "⟩").Replace(s)
}

func renormalise(s string) string {
	s = rfc3339.ReplaceAllString(s, "<time>")
	return strings.NewReplacer("⟨", "<", "⟩", ">").Replace(s)
}

func TestGolden(t *testing.T) {
	dir := goldenDir
	checked := 0
	goldenCalls(t, func(method, path, status, ctype, file string) {
		if !strings.HasPrefix(ctype, "application/json") {
			return // csv and parsable2 spend: the client returns them as sent
		}
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		var c func([]byte) ([]byte, error)
		if status[0] != '2' {
			c = codec[adminapi.ErrorBody]()
		} else if i := routeOf(method, path); i >= 0 {
			c = goldenRoutes[i].codec
		}
		if c == nil {
			t.Errorf("%s %s %s → %s: no type claims this answer", file, method, path, status)
			return
		}
		got, err := c([]byte(denormalise(string(b))))
		if err != nil {
			t.Errorf("%s %s %s: %v\n%s", file, method, path, err, b)
			return
		}
		if g := renormalise(string(got)); g != string(b) {
			t.Errorf("%s %s %s: encoded again, the body differs\n got: %s\nwant: %s", file, method, path, g, b)
		}
		checked++
	})
	t.Logf("%d golden bodies checked", checked)
	if checked < 100 {
		t.Fatalf("only %d golden bodies checked", checked)
	}
}

// goldenDir holds the server's goldens (admin's golden test writes them):
// the answers these types must decode and encode byte for byte.
var goldenDir = filepath.Join("..", "admin", "testdata", "admin-golden")
