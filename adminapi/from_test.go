package adminapi_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/adminapi"
)

func TestViewsOfStoredObjects(t *testing.T) {
	at := time.Date(2026, 11, 30, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"active key", adminapi.KeyOf(llmflow.Key{ID: "key_1", Hash: [32]byte{1}, Hint: "llmf-ab12…", Name: "n", Org: "o", Team: "t", CreatedAt: at}),
			`{"id":"key_1","hint":"llmf-ab12…","name":"n","org":"o","team":"t","tags":[],"rpm":0,"tpm":0,"max_inflight":0,"active":true,"created_at":"2026-11-30T03:04:05Z"}`},
		{"revoked key", adminapi.KeyOf(llmflow.Key{ID: "key_1", Project: "p", Owner: "u", Tags: []string{"x"}, RPM: 1, TPM: 2, MaxInFlight: 3, CreatedAt: at, RevokedAt: at}),
			`{"id":"key_1","hint":"","name":"","org":"","team":"","project":"p","owner":"u","tags":["x"],"rpm":1,"tpm":2,"max_inflight":3,"active":false,"created_at":"2026-11-30T03:04:05Z","revoked_at":"2026-11-30T03:04:05Z"}`},
		{"disabled key", adminapi.KeyOf(llmflow.Key{ID: "key_1", Disabled: true, CreatedAt: at}),
			`{"id":"key_1","hint":"","name":"","org":"","team":"","tags":[],"rpm":0,"tpm":0,"max_inflight":0,"active":false,"disabled":true,"created_at":"2026-11-30T03:04:05Z"}`},
		{"token", adminapi.TokenOf(llmflow.AdminToken{ID: "tok_1", User: "u", Hash: [32]byte{1}, Hint: "llma-ab12…", Name: "ci", CreatedAt: at}),
			`{"id":"tok_1","user":"u","hint":"llma-ab12…","name":"ci","created_at":"2026-11-30T03:04:05Z"}`},
		{"revoked token", adminapi.TokenOf(llmflow.AdminToken{ID: "tok_1", CreatedAt: at, RevokedAt: at}),
			`{"id":"tok_1","user":"","hint":"","name":"","created_at":"2026-11-30T03:04:05Z","revoked_at":"2026-11-30T03:04:05Z"}`},
		{"audit entry", adminapi.AuditEntryOf(llmflow.AuditEntry{ID: 7, Time: at, Actor: "m", Action: "key.revoke", Target: "key k", Team: "t", Before: `{"a":1}`, Remote: "127.0.0.1/32"}),
			`{"id":7,"time":"2026-11-30T03:04:05Z","actor":"m","action":"key.revoke","target":"key k","team":"t","before":{"a":1},"remote":"127.0.0.1/32"}`},
		{"sync run", adminapi.SyncRunOf(llmflow.SyncRun{ID: 1, Started: at, Finished: at, Source: "sacctmgr", Outcome: "failed", Error: "e", Created: 1, LimitsChanged: 9}),
			`{"id":1,"started":"2026-11-30T03:04:05Z","finished":"2026-11-30T03:04:05Z","source":"sacctmgr","dry_run":false,"outcome":"failed","error":"e","created":1,"shares_changed":0,"reparented":0,"disabled":0,"reenabled":0,"members":0,"unchanged":0}`},
	} {
		b, err := json.Marshal(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, b, tc.want)
		}
	}
}
