package alerts_test

import (
	"context"
	"fmt"
	"io"
	"mime"
	"mime/quotedprintable"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/alerts"
)

const token = "tok-9f8e7d6c5b4a-secret"

// rig is one gateway's alerting: senders to a webhook and an SMTP server,
// a dispatcher and an outbox on a store handle, metrics of its own.
type rig struct {
	store  alerts.Store
	disp   *alerts.Dispatcher
	outbox *alerts.Outbox
	reg    *prometheus.Registry
	log    *syncBuffer
}

func newRig(t *testing.T, st alerts.Store, h *hook, m *smtpd, clk *clock, owner string) *rig {
	t.Helper()
	web, err := alerts.NewWebhook(h.url(t, "/hooks/T0123/B0456"), alerts.WebhookOptions{TokenFile: secretFile(t, "token", token)})
	if err != nil {
		t.Fatal(err)
	}
	em, err := alerts.NewEmail(alerts.EmailOptions{Server: m.addr(), From: "llmflow@hpc.example.org",
		To: []string{"hpc-admins@example.org", "pi@lab.example.org"}, TLS: "none", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{store: st, reg: prometheus.NewRegistry(), log: &syncBuffer{}}
	mt := alerts.NewMetrics(r.reg)
	r.disp, err = alerts.NewDispatcher(alerts.Options{Store: st, Senders: []alerts.Sender{web, em}, Metrics: mt,
		Log: newLogger(r.log), Now: clk.Now, Rand: func() float64 { return 0.5 }, Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	r.outbox = alerts.NewOutbox(st, r.disp.Channels(), mt, r.disp.Wake)
	return r
}

// drain runs passes, moving the clock past every backoff, until nothing
// is pending; it fails after max passes.
func (r *rig) drain(t *testing.T, clk *clock, max int) {
	t.Helper()
	for range max {
		if _, err := r.disp.RunOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		if pending(t, r.store) == 0 {
			return
		}
		clk.Advance(time.Hour)
	}
	t.Fatalf("still %d pending after %d passes", pending(t, r.store), max)
}

// TestArrivesOnce: a webhook and an SMTP relay that both fail three
// times first get the alert exactly once each, however often it is
// enqueued.
func TestArrivesOnce(t *testing.T) {
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			clk := newClock()
			h, m := startHook(t, 3), startSMTPD(t, &smtpd{failData: 3})
			r := newRig(t, open(t)(), h, m, clk, "gw1")
			a := testAlert("42", clk.Now())
			for range 3 {
				if err := r.outbox.Enqueue(t.Context(), a); err != nil {
					t.Fatal(err)
				}
			}
			if ok, err := r.outbox.Enqueued(t.Context(), a.ID); !ok || err != nil {
				t.Fatalf("Enqueued = %v, %v", ok, err)
			}

			// first attempt fails on both channels; the next one is due
			// after the first backoff, not before
			p, err := r.disp.RunOnce(t.Context())
			if err != nil || p != (alerts.Pass{Claimed: 2, Failed: 2}) {
				t.Fatalf("first pass %+v, %v", p, err)
			}
			first := alerts.DefaultBackoff.Next(1, 0.5)
			for _, msg := range mustList(t, r.store) {
				if !msg.NextAttemptAt.Equal(clk.Now().Add(first)) || msg.Attempts != 1 || msg.LastError == "" {
					t.Errorf("after a failure: %+v", msg)
				}
			}
			clk.Advance(first - time.Second)
			if p, _ := r.disp.RunOnce(t.Context()); p.Claimed != 0 {
				t.Fatalf("claimed before the backoff ended: %+v", p)
			}
			r.drain(t, clk, 10)

			reqs, acc := h.snapshot()
			if reqs != 4 || len(acc) != 1 {
				t.Errorf("webhook: %d requests, %d accepted; want 4 and 1", reqs, len(acc))
			}
			mails := m.mails()
			if m.rejected != 3 || len(mails) != 1 {
				t.Fatalf("smtp: %d rejected, %d accepted; want 3 and 1", m.rejected, len(mails))
			}
			checkWebhook(t, acc[0], a)
			checkMail(t, mails[0], a, clk)

			want := map[string]float64{
				"llmflow_alerts_enqueued_total{email}": 1, "llmflow_alerts_enqueued_total{webhook}": 1,
				"llmflow_alerts_delivered_total{email}": 1, "llmflow_alerts_delivered_total{webhook}": 1,
				"llmflow_alerts_failed_total{email}": 3, "llmflow_alerts_failed_total{webhook}": 3,
				"llmflow_alerts_lease_lost_total{email}": 0, "llmflow_alerts_lease_lost_total{webhook}": 0,
				"llmflow_alerts_pending{email}": 0, "llmflow_alerts_pending{webhook}": 0,
			}
			if diff := cmp.Diff(want, metricValues(t, r.reg)); diff != "" {
				t.Errorf("metrics (-want +got):\n%s", diff)
			}
			// enqueued again after delivery: nothing more is sent
			if err := r.outbox.Enqueue(t.Context(), a); err != nil {
				t.Fatal(err)
			}
			clk.Advance(24 * time.Hour)
			if p, _ := r.disp.RunOnce(t.Context()); p.Claimed != 0 {
				t.Errorf("a delivered alert was claimed again: %+v", p)
			}
			checkNoSecrets(t, r)
		})
	}
}

func mustList(t *testing.T, s alerts.Store) []llmflow.OutboxMessage {
	t.Helper()
	ms, err := s.ListOutbox(context.Background(), llmflow.OutboxFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func checkWebhook(t *testing.T, got hookRequest, a alerts.Alert) {
	t.Helper()
	if v := got.header.Get("Authorization"); v != "Bearer "+token {
		t.Errorf("Authorization %q", v)
	}
	if got.header.Get("Content-Type") != "application/json" || got.header.Get("Idempotency-Key") != a.ID {
		t.Errorf("headers %v", got.header)
	}
	for k, v := range map[string]any{
		"type": "budget.soft_limit", "id": a.ID, "budget_id": "42", "scope_kind": "team", "scope_name": "lab-chimie-é",
		"model": "llama-3.3-70b", "period": "month", "period_start": "2026-12-01T00:00:00Z",
		"limit_gpu_hours": 500.0, "soft_limit_gpu_hours": 400.0, "spent_gpu_hours": 400.25, "text": a.Summary(),
	} {
		if got.body[k] != v {
			t.Errorf("body %s = %v, want %v", k, got.body[k], v)
		}
	}
}

func checkMail(t *testing.T, got received, a alerts.Alert, clk *clock) {
	t.Helper()
	if got.from != "llmflow@hpc.example.org" || !cmp.Equal(got.to, []string{"hpc-admins@example.org", "pi@lab.example.org"}) {
		t.Errorf("envelope %s → %v", got.from, got.to)
	}
	msg, err := mail.ReadMessage(strings.NewReader(got.data))
	if err != nil {
		t.Fatalf("not a message: %v\n%s", err, got.data)
	}
	date, err := msg.Header.Date()
	if err != nil || !date.Equal(clk.Now()) {
		t.Errorf("Date %v, %v; want the clock's %v", date, err, clk.Now())
	}
	if id := msg.Header.Get("Message-ID"); id != alerts.MessageID(a.ID, "llmflow@hpc.example.org") || !strings.HasSuffix(id, "@hpc.example.org>") {
		t.Errorf("Message-ID %q", id)
	}
	subject, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
	if err != nil || subject != a.Summary() {
		t.Errorf("Subject %q, %v; want %q", subject, err, a.Summary())
	}
	for k, v := range map[string]string{"From": "llmflow@hpc.example.org", "To": "hpc-admins@example.org, pi@lab.example.org",
		"Content-Type": "text/plain; charset=utf-8", "Content-Transfer-Encoding": "quoted-printable",
		"Auto-Submitted": "auto-generated", "X-Llmflow-Alert-Id": a.ID, "Mime-Version": "1.0"} {
		if got := msg.Header.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	body, err := io.ReadAll(quotedprintable.NewReader(msg.Body))
	if err != nil || strings.ReplaceAll(string(body), "\r\n", "\n") != a.Text() {
		t.Errorf("body %q, %v; want %q", body, err, a.Text())
	}
}

// checkNoSecrets checks the logs and the stored errors for the token and
// the webhook URL's path.
func checkNoSecrets(t *testing.T, r *rig, more ...string) {
	t.Helper()
	var stored strings.Builder
	for _, m := range mustList(t, r.store) {
		stored.WriteString(m.LastError + "\n")
	}
	for _, s := range append([]string{token, "T0123/B0456", "B0456"}, more...) {
		if strings.Contains(r.log.String(), s) {
			t.Errorf("log shows %q:\n%s", s, r.log.String())
		}
		if strings.Contains(stored.String(), s) {
			t.Errorf("stored errors show %q:\n%s", s, stored.String())
		}
	}
}

// TestRestartInTheMiddle: a gateway fails twice, a second one claims the
// alert and dies holding it; a restarted gateway on the same database,
// enqueueing the alert again, delivers it once after the lease expired.
func TestRestartInTheMiddle(t *testing.T) {
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			clk := newClock()
			h, m := startHook(t, 3), startSMTPD(t, &smtpd{failData: 3})
			handle := open(t)
			first := newRig(t, handle(), h, m, clk, "gw1")
			a := testAlert("7", clk.Now())
			if err := first.outbox.Enqueue(t.Context(), a); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if p, err := first.disp.RunOnce(t.Context()); err != nil || p.Failed != 2 {
					t.Fatalf("pass %+v, %v", p, err)
				}
				clk.Advance(time.Hour)
			}
			// a gateway claims both rows and crashes before sending
			crashed, err := first.store.ClaimOutbox(t.Context(), llmflow.OutboxClaim{Channels: []string{"email", "webhook"},
				Now: clk.Now(), LeaseUntil: clk.Now().Add(time.Minute), Token: "crashed-gw", Limit: 10})
			if err != nil || len(crashed) != 2 {
				t.Fatalf("crash claim %v, %v", crashed, err)
			}

			second := newRig(t, handle(), h, m, clk, "gw1-restarted")
			if err := second.outbox.Enqueue(t.Context(), a); err != nil {
				t.Fatal(err)
			}
			if p, _ := second.disp.RunOnce(t.Context()); p.Claimed != 0 {
				t.Fatalf("claimed rows under another gateway's lease: %+v", p)
			}
			second.drain(t, clk, 10)
			if _, acc := h.snapshot(); len(acc) != 1 {
				t.Errorf("webhook got %d deliveries, want 1", len(acc))
			}
			if len(m.mails()) != 1 {
				t.Errorf("smtp got %d messages, want 1", len(m.mails()))
			}
			if v := metricValues(t, second.reg); v["llmflow_alerts_enqueued_total{webhook}"] != 0 || v["llmflow_alerts_delivered_total{webhook}"] != 1 {
				t.Errorf("restarted gateway's metrics %v", v)
			}
			for _, msg := range mustList(t, second.store) {
				if !msg.Delivered() || msg.Attempts != 5 {
					t.Errorf("%s/%s: %+v; want delivered at the 5th claim", msg.ID, msg.Channel, msg)
				}
			}
		})
	}
}

// TestTwoDispatchers: two gateways on one database both enqueue the same
// alerts and dispatch at once; every alert arrives once per channel.
// The clock is real here (no wait is asserted): leases must hold while
// the other gateway sends.
func TestTwoDispatchers(t *testing.T) {
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			h, m := startHook(t, 3), startSMTPD(t, &smtpd{failData: 3})
			handle := open(t)
			real := &clock{}
			var rigs []*rig
			for i := range 2 {
				r := newRig(t, handle(), h, m, real, fmt.Sprintf("gw%d", i))
				// fast retries, real time
				d, err := alerts.NewDispatcher(alerts.Options{Store: r.store, Senders: sendersOf(t, h, m), Owner: fmt.Sprintf("gw%d", i),
					Backoff: alerts.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond}, Batch: 4})
				if err != nil {
					t.Fatal(err)
				}
				r.disp, r.outbox = d, alerts.NewOutbox(r.store, d.Channels(), nil, d.Wake)
				rigs = append(rigs, r)
			}
			const n = 12
			now := time.Now().UTC()
			var wg sync.WaitGroup
			for _, r := range rigs {
				wg.Go(func() {
					for i := range n {
						if err := r.outbox.Enqueue(context.Background(), testAlert(fmt.Sprint(i), now)); err != nil {
							t.Error(err)
						}
					}
				})
			}
			wg.Wait()
			for _, r := range rigs {
				wg.Go(func() {
					for range 5000 {
						if _, err := r.disp.RunOnce(context.Background()); err != nil {
							t.Error(err)
							return
						}
						if pending(t, r.store) == 0 {
							return
						}
						time.Sleep(time.Millisecond)
					}
					t.Error("alerts still pending")
				})
			}
			wg.Wait()
			_, acc := h.snapshot()
			perKey := map[string]int{}
			for _, r := range acc {
				perKey[r.header.Get("Idempotency-Key")]++
			}
			perMsgID := map[string]int{}
			for _, ml := range m.mails() {
				msg, err := mail.ReadMessage(strings.NewReader(ml.data))
				if err != nil {
					t.Fatal(err)
				}
				perMsgID[msg.Header.Get("Message-ID")]++
			}
			if len(perKey) != n || len(acc) != n || len(perMsgID) != n || len(m.mails()) != n {
				t.Errorf("webhook %d deliveries of %d alerts, smtp %d of %d; want %d of each", len(acc), len(perKey), len(m.mails()), len(perMsgID), n)
			}
		})
	}
}

func sendersOf(t *testing.T, h *hook, m *smtpd) []alerts.Sender {
	web, err := alerts.NewWebhook(h.url(t, "/hook"), alerts.WebhookOptions{TokenFile: secretFile(t, "token", token)})
	if err != nil {
		t.Fatal(err)
	}
	em, err := alerts.NewEmail(alerts.EmailOptions{Server: m.addr(), From: "a@b.org", To: []string{"c@d.org"}, TLS: "none"})
	if err != nil {
		t.Fatal(err)
	}
	return []alerts.Sender{web, em}
}

func TestEnqueueRefusesBadAlerts(t *testing.T) {
	st := backends["SQLite"](t)()
	o := alerts.NewOutbox(st, []string{"webhook"}, nil, nil)
	good := testAlert("1", time.Now())
	for name, mod := range map[string]func(*alerts.Alert){
		"NoID":           func(a *alerts.Alert) { a.ID = "" },
		"HeaderInjected": func(a *alerts.Alert) { a.ScopeName = "lab\r\nBcc: evil@example.org" },
		"NaN":            func(a *alerts.Alert) { a.Spent = a.Spent * 0 / 0 },
		"Negative":       func(a *alerts.Alert) { a.Limit = -1 },
		"NoTime":         func(a *alerts.Alert) { a.At = time.Time{} },
		"LongModel":      func(a *alerts.Alert) { a.Model = strings.Repeat("m", 300) },
	} {
		a := good
		mod(&a)
		if err := o.Enqueue(t.Context(), a); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if ms := mustList(t, st); ms != nil {
		t.Errorf("stored %v", ms)
	}
	var nilOutbox *alerts.Outbox
	if err := nilOutbox.Enqueue(t.Context(), good); err != nil {
		t.Errorf("nil outbox: %v", err)
	}
}
