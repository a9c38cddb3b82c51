package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
	"github.com/prometheus/client_golang/prometheus"
)

// TestKeyExpiryRotationModels: a key stops at its expiry, also from the
// cache; after a rotation the new secret works and the previous one
// until its grace ends, then never again; a key's model list hides the
// other models from its requests and listings as a team's does.
func TestKeyExpiryRotationModels(t *testing.T) {
	_, up := simUpstream(t, 0)
	clk := gatewaytest.NewClock()
	e, db := budgetEnv(t, []string{up.URL}, "", func(o *Options) { o.Now = clk.Now })
	newKey := func(id string, mod func(*llmflow.Key)) string {
		t.Helper()
		secret, hash, hint := llmflow.NewKeySecret()
		k := llmflow.Key{ID: id, Hash: hash, Hint: hint, Org: "etabA", Team: "lab-nlp", CreatedAt: clk.Now()}
		mod(&k)
		if err := db.CreateKey(t.Context(), k); err != nil {
			t.Fatal(err)
		}
		return secret
	}
	chat := func(secret, model string) int {
		t.Helper()
		resp := gatewaytest.Post(t, e.srv, secret, "/v1/chat/completions", `{"model":"`+model+`","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`)
		resp.Body.Close()
		return resp.StatusCode
	}
	models := func(secret string) string {
		t.Helper()
		code, body := gatewaytest.Do(t, e.srv, "GET", "/v1/models", secret, "")
		if code != 200 {
			return ""
		}
		var l struct{ Data []struct{ ID string } }
		json.Unmarshal([]byte(body), &l)
		var ids []string
		for _, m := range l.Data {
			ids = append(ids, m.ID)
		}
		return strings.Join(ids, ",")
	}

	expiring := newKey("key_expiring", func(k *llmflow.Key) { k.ExpiresAt = clk.Now().Add(time.Hour) })
	onlyM := newKey("key_only_m", func(k *llmflow.Key) { k.Models = []string{"m"} })
	rotated := newKey("key_rotated", func(*llmflow.Key) {})

	t.Run("expiry", func(t *testing.T) {
		if c := chat(expiring, "m"); c != 200 {
			t.Fatalf("before expiry: %d", c)
		}
		clk.Add(time.Hour - time.Second)
		if c := chat(expiring, "m"); c != 200 {
			t.Errorf("a second before: %d", c)
		}
		clk.Add(time.Second) // cached since the first request: expiry holds anyway
		if c := chat(expiring, "m"); c != http.StatusUnauthorized {
			t.Errorf("at expiry: %d, want 401", c)
		}
		if code, body := gatewaytest.Do(t, e.srv, "GET", "/v1/me", expiring, ""); code != 401 || !strings.Contains(body, "expired at") {
			t.Errorf("/v1/me at expiry: %d %s", code, body)
		}
	})

	t.Run("model list", func(t *testing.T) {
		for _, tc := range []struct {
			secret, model string
			want          int
		}{{onlyM, "m", 200}, {onlyM, "batchm", 404}, {e.key, "batchm", 200}} {
			if c := chat(tc.secret, tc.model); c != tc.want {
				t.Errorf("model %s: %d, want %d", tc.model, c, tc.want)
			}
		}
		if got := models(onlyM); got != "m" {
			t.Errorf("/v1/models of the key listing m: %q", got)
		}
		if code, _ := gatewaytest.Do(t, e.srv, "GET", "/v1/models/batchm", onlyM, ""); code != 404 {
			t.Errorf("/v1/models/batchm: %d", code)
		}
		if got := models(e.key); got != "m,batchm" {
			t.Errorf("/v1/models of a key without a list: %q", got)
		}
	})

	t.Run("rotation", func(t *testing.T) {
		if c := chat(rotated, "m"); c != 200 { // cached under the old secret
			t.Fatalf("before rotation: %d", c)
		}
		k, err := db.KeyByID(t.Context(), "key_rotated")
		if err != nil {
			t.Fatal(err)
		}
		next, hash, hint := llmflow.NewKeySecret()
		if err := db.RotateKey(t.Context(), k.ID, hash, hint, clk.Now().Add(10*time.Minute)); err != nil {
			t.Fatal(err)
		}
		e.gw.ForgetKey(k.Hash) // as the admin API does
		for _, tc := range []struct {
			name   string
			after  time.Duration
			secret string
			want   int
		}{
			{"new secret", 0, next, 200},
			{"old secret in its grace", 0, rotated, 200},
			{"old secret, a second before the end", 10*time.Minute - time.Second, rotated, 200},
			{"old secret at the end", time.Second, rotated, 401},
			{"old secret after (cached miss)", time.Minute, rotated, 401},
			{"new secret still", 0, next, 200},
		} {
			clk.Add(tc.after)
			if c := chat(tc.secret, "m"); c != tc.want {
				t.Errorf("%s: %d, want %d", tc.name, c, tc.want)
			}
		}
	})
}

// BenchmarkAuthCached is a request's authentication on a key-cache hit.
func BenchmarkAuthCached(b *testing.B) {
	keys := gatewaytest.NewKeys()
	secret, hash, hint := llmflow.NewKeySecret()
	keys.CreateKey(b.Context(), llmflow.Key{ID: "key_b", Hash: hash, Hint: hint, Team: "lab-nlp"})
	a := newAuthenticator(Options{Keys: keys}, config.Limits{AuthFailuresPerMinute: 60}, newMetrics(prometheus.NewRegistry()))
	hdr, now := "Bearer "+secret, time.Now()
	if _, err := a.authenticate(b.Context(), hdr, "127.0.0.1:1", now); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.authenticate(b.Context(), hdr, "127.0.0.1:1", now); err != nil {
			b.Fatal(err)
		}
	}
}
