package alerts_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/alerts"
)

// BenchmarkEnqueue: one new alert written to the outbox (two channels,
// one transaction), per store.
func BenchmarkEnqueue(b *testing.B) {
	for _, name := range []string{"SQLite", "PostgreSQL"} {
		b.Run(name, func(b *testing.B) {
			st := backends[name](b)()
			o := alerts.NewOutbox(st, []string{"email", "webhook"}, nil, nil)
			now := time.Now()
			b.ResetTimer()
			for i := range b.N {
				if err := o.Enqueue(b.Context(), testAlert(fmt.Sprint(i), now)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDeliver: claim, POST to a loopback webhook and mark delivered,
// per alert, in batches of 16.
func BenchmarkDeliver(b *testing.B) {
	for _, name := range []string{"SQLite", "PostgreSQL"} {
		b.Run(name, func(b *testing.B) {
			st := backends[name](b)()
			h := startHook(b, 0)
			web, _ := alerts.NewWebhook(h.url(b, "/hook"), alerts.WebhookOptions{})
			d, err := alerts.NewDispatcher(alerts.Options{Store: st, Senders: []alerts.Sender{web}})
			if err != nil {
				b.Fatal(err)
			}
			o := alerts.NewOutbox(st, d.Channels(), nil, nil)
			now := time.Now()
			for i := range b.N {
				if err := o.Enqueue(b.Context(), testAlert(fmt.Sprint(i), now)); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			delivered := 0
			for delivered < b.N {
				p, err := d.RunOnce(b.Context())
				if err != nil {
					b.Fatal(err)
				}
				delivered += p.Delivered
			}
		})
	}
}
