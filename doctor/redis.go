package doctor

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/redisstate"
)

// checkRedis pings the redis block's server with its password and TLS,
// reads its clock, and fails a password_file that Redis does not ask for
// (redisstate.ErrNoPasswordNeeded).
func (r *run) checkRedis(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	rc := r.cfg.Redis
	o := &redis.Options{Addr: rc.Address, DialTimeout: r.o.Timeout, ReadTimeout: r.o.Timeout, WriteTimeout: r.o.Timeout,
		MaxRetries: -1}
	if rc.PasswordFile != "" {
		pw, err := config.ReadSecret(rc.PasswordFile)
		if err != nil {
			r.add(Finding{Check: "redis", Status: Fail, Message: "password_file: " + err.Error(), Fix: "see the secrets finding"})
			return
		}
		o.Password = pw
	}
	if rc.TLS {
		host := rc.Address[:strings.LastIndexByte(rc.Address, ':')]
		o.TLSConfig = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	}
	c := redis.NewClient(o)
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		fix := "start Redis, or fix redis { address, tls }; serve starts without it, each replica then admits against its own slice"
		if strings.Contains(err.Error(), "NOAUTH") || strings.Contains(err.Error(), "WRONGPASS") {
			fix = "put Redis's password (requirepass) in redis { password_file }"
		}
		r.add(Finding{Check: "redis", Status: Fail, Message: fmt.Sprintf("%s: %v", rc.Address, err), Fix: fix})
		return
	}
	if t, err := c.Time(ctx).Result(); err == nil {
		r.clock(clockRef{source: "Redis " + rc.Address, theirs: t, at: r.o.Now()})
	}
	if o.Password != "" && redisstate.AnswersWithoutPassword(ctx, o) {
		r.add(Finding{Check: "redis", Status: Fail, Message: rc.Address + ": " + redisstate.ErrNoPasswordNeeded.Error(),
			Fix: "set requirepass in redis.conf (then restart Redis), or remove password_file"})
		return
	}
	r.add(Finding{Check: "redis", Status: OK, Message: rc.Address + ": answers"})
}
