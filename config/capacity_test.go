package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/config"
)

// capacity = "auto": bounds, tuning and defaults; C starts at min; a
// headroom given is kept (and must be below min), none follows C (-1).
func TestPoolAutoCapacity(t *testing.T) {
	for _, tc := range []struct {
		pool string
		want *config.AutoCapacity
		cap  int
	}{
		{`capacity = 16`, nil, 16},
		{`capacity = "auto"` + "\nmin = 8\nmax = 64\nengine = \"llama-server\"", &config.AutoCapacity{Min: 8, Max: 64, KVTarget: 0.9, Interval: 2 * time.Second, Hold: 10 * time.Second, Headroom: -1}, 8},
		{`capacity = "auto"` + "\nmin = 8\nmax = 64\nengine = \"sglang\"", &config.AutoCapacity{Min: 8, Max: 64, KVTarget: 0.9, Interval: 2 * time.Second, Hold: 10 * time.Second, Headroom: -1}, 8},
		{`capacity = "auto"` + "\nmin = 8\nmax = 64", &config.AutoCapacity{Min: 8, Max: 64, KVTarget: 0.9, Interval: 2 * time.Second, Hold: 10 * time.Second, Headroom: -1}, 8},
		{`capacity = "auto"` + "\nmin = 8\nmax = 8\nkv_target = 0.8\ncapacity_interval = \"5s\"\ncapacity_hold = \"30s\"\nheadroom = 2",
			&config.AutoCapacity{Min: 8, Max: 8, KVTarget: 0.8, Interval: 5 * time.Second, Hold: 30 * time.Second, Headroom: 2}, 8},
		{`capacity = "auto"` + "\nmin = 8\nmax = 64\nreclaim = \"none\"\nheadroom = 2", &config.AutoCapacity{Min: 8, Max: 64, KVTarget: 0.9, Interval: 2 * time.Second, Hold: 10 * time.Second, Headroom: -1}, 8},
	} {
		cfg, err := config.Parse("p.hcl", []byte("pool \"p\" {\n"+tc.pool+"\n}\n"))
		if err != nil {
			t.Fatalf("%s: %v", tc.pool, err)
		}
		p := cfg.Pools[0]
		if p.Capacity != tc.cap || (p.Auto == nil) != (tc.want == nil) || p.Auto != nil && *p.Auto != *tc.want {
			t.Errorf("%q: capacity %d auto %+v, want %d %+v", tc.pool, p.Capacity, p.Auto, tc.cap, tc.want)
		}
	}
}

func TestPoolAutoCapacityErrors(t *testing.T) {
	for _, tc := range []struct{ pool, want string }{
		{`capacity = "auto"`, `p.hcl:2:12: capacity = "auto" needs min and max`},
		{`capacity = "auto"` + "\nmin = 4", `p.hcl:2:12: capacity = "auto" needs min and max`},
		{`capacity = "auto"` + "\nmin = 8\nmax = 4", `p.hcl:4:7: max (4) must be at least min (8)`},
		{`capacity = "auto"` + "\nmin = 0\nmax = 4", `p.hcl:3:7: min must be between 1 and 1048576`},
		{`capacity = "auto"` + "\nmin = 2\nmax = 4\nkv_target = 0", `p.hcl:5:13: kv_target must be above 0`},
		{`capacity = "auto"` + "\nmin = 2\nmax = 4\nkv_target = 1.5", `p.hcl:5:13: kv_target must be`},
		{`capacity = "auto"` + "\nmin = 4\nmax = 8\nheadroom = 4", `p.hcl:5:12: headroom must be less than the pool's capacity (4)`},
		{`capacity = "some"`, `p.hcl:2:12: Incorrect attribute value type`},
		{`capacity = 16` + "\nmin = 4", `p.hcl:3:1: min applies only to capacity = "auto"`},
		{`capacity = "auto"` + "\nmin = 4\nmax = 8\nengine = \"openai\"", `p.hcl:2:12: capacity = "auto" reads the engines' load from their metrics; the openai-compatible engines`},
		{`capacity = "auto"` + "\nmin = 4\nmax = 8\nscheduler = \"fcfs\"", `p.hcl:2:12: capacity = "auto" reads the engines' load`},
	} {
		_, err := config.Parse("p.hcl", []byte("pool \"p\" {\n"+tc.pool+"\n}\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %s", tc.pool, err, tc.want)
		}
	}
}
