package adminapi

import (
	"encoding/json"
	"time"

	"github.com/go-llmflow/llmflow"
)

// The functions below make the API's view of a stored object, the way the
// handlers show it: never a secret or a secret's hash, lists never null, a
// time that did not happen left out.

// KeyOf is k as listings show it (Key is empty: the secret is added to
// the answer of a creation only).
func KeyOf(k llmflow.Key) Key {
	v := Key{ID: k.ID, Hint: k.Hint, Name: k.Name, Org: k.Org, Team: k.Team, Project: k.Project, Owner: k.Owner,
		Tags: k.Tags, RPM: k.RPM, TPM: k.TPM, MaxInFlight: k.MaxInFlight, Active: k.Active(), Disabled: k.Disabled,
		CreatedAt: k.CreatedAt, RevokedAt: timeOrNil(k.RevokedAt), ExpiresAt: timeOrNil(k.ExpiresAt), Models: k.Models}
	if v.Tags == nil {
		v.Tags = []string{}
	}
	if k.PrevHash != ([32]byte{}) {
		v.PreviousValidUntil = timeOrNil(k.PrevExpiresAt)
	}
	return v
}

// TokenOf is t as listings show it (Token is empty: the secret is added
// to the answer of a creation only).
func TokenOf(t llmflow.AdminToken) Token {
	return Token{ID: t.ID, User: t.User, Hint: t.Hint, Name: t.Name, CreatedAt: t.CreatedAt, RevokedAt: timeOrNil(t.RevokedAt)}
}

// AuditEntryOf is e as GET /admin/audit shows it: Before and After are
// the JSON stored, left out when empty.
func AuditEntryOf(e llmflow.AuditEntry) AuditEntry {
	return AuditEntry{ID: e.ID, Time: e.Time, Actor: e.Actor, Action: e.Action, Target: e.Target,
		Org: e.Org, Team: e.Team, Before: rawOrNil(e.Before), After: rawOrNil(e.After), Remote: e.Remote}
}

// SyncRunOf is r as GET /admin/sync lists it.
func SyncRunOf(r llmflow.SyncRun) SyncRun {
	return SyncRun{ID: r.ID, Started: r.Started, Finished: r.Finished, Source: r.Source, DryRun: r.DryRun,
		Outcome: r.Outcome, Error: r.Error, Created: r.Created, SharesChanged: r.SharesChanged, Reparented: r.Reparented,
		Disabled: r.Disabled, Reenabled: r.Reenabled, Members: r.Members, Unchanged: r.Unchanged}
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func rawOrNil(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}
