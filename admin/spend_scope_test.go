package admin

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/authz"
)

// TestSpendScopesProxyReader: a proxy reader's spend is the one scope
// that selects everything (RollupFilter{}), through the same path as a
// scoped reader's; a user without a role has none.
func TestSpendScopesProxyReader(t *testing.T) {
	for _, p := range []Principal{
		{Name: "master", Role: RoleProxyAdmin},
		{Name: "v", User: true, Grants: []authz.Grant{{Role: authz.ProxyViewer}}},
	} {
		if got := spendScopes(p); !reflect.DeepEqual(got, []llmflow.RollupFilter{{}}) {
			t.Errorf("%s: scopes %+v, want one selecting everything", p.Name, got)
		}
	}
	if got := spendScopes(Principal{Name: "nobody", User: true}); len(got) != 0 {
		t.Errorf("no role: scopes %+v, want none", got)
	}
	got := spendScopes(Principal{Name: "o", User: true, Grants: []authz.Grant{{Role: authz.OrgAdmin, Org: "etabA"}}})
	if !reflect.DeepEqual(got, []llmflow.RollupFilter{{Org: "etabA"}}) {
		t.Errorf("org admin: scopes %+v", got)
	}
}

// TestSpendFormatCheckedFirst: an unknown format is refused before the
// store is read, for proxy readers and scoped readers alike, with the
// message the reports package gives.
func TestSpendFormatCheckedFirst(t *testing.T) {
	var calls atomic.Int64
	sp := fakeSpend{spend: func(context.Context, time.Time, time.Time, llmflow.RollupFilter) ([]llmflow.Rollup, error) {
		calls.Add(1)
		return nil, nil
	}}
	e := newAdminEnv(t, "", func(o *envOptions) { o.Spend = sp })
	for _, p := range []string{"master", "pview", "oadmin", "member"} {
		b := e.must(t, http.MethodGet, "/admin/spend?from=2000-01-01&to=2100-01-01&format=xml", p, "", http.StatusBadRequest)
		if !strings.Contains(b, `unknown format \"xml\" (one of json, csv, parsable2)`) || !strings.Contains(b, `"param":"format"`) {
			t.Errorf("%s: %s", p, b)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the store was read %d times for a request refused by its format", n)
	}
	e.must(t, http.MethodGet, "/admin/spend?from=2000-01-01&to=2100-01-01&format=parsable2", "oadmin", "", http.StatusOK)
	if n := calls.Load(); n != 1 {
		t.Errorf("store read %d times for one scoped report, want 1", n)
	}
}

// TestListKeysKnownParams: GET /admin/keys refuses an unknown parameter
// with knownParams's answer, as every listing does.
func TestListKeysKnownParams(t *testing.T) {
	e := newAdminEnv(t, "")
	b := e.must(t, http.MethodGet, "/admin/keys?tema=lab-nlp", "master", "", http.StatusBadRequest)
	r, _ := http.NewRequest(http.MethodGet, "/admin/keys?tema=lab-nlp", nil)
	want := llmflow.ErrorMessage(knownParams(r, "org", "team", "include_revoked"))
	if !strings.Contains(b, strings.ReplaceAll(want, `"`, `\"`)) {
		t.Errorf("answer %s, want the message %q", b, want)
	}
}
