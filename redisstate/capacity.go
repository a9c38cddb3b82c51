package redisstate

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Capacity agreement (capacity = "auto"): one replica at a time decides a
// pool's C, under a lease in "<prefix>{<pool>}:cap:lease" (its name,
// expiring after the ttl it asks for), and writes it to
// "<prefix>{<pool>}:cap"; every replica reads C from there. A replica that
// takes the lease over (the leader died or stopped renewing) adopts the C
// in force instead of writing its own, so C carries over without a jump;
// so does a process's first call (ARGV[4] = 1), which may hold the lease
// of a process of the same replica name that just restarted.
var agreeScript = redis.NewScript(`
local holder = redis.call('GET', KEYS[1])
local cur = redis.call('GET', KEYS[2])
if holder == false or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
  if cur == false or (holder == ARGV[1] and ARGV[4] ~= '1') then
    redis.call('SET', KEYS[2], ARGV[2])
    cur = ARGV[2]
  end
  return {tonumber(cur), 1}
end
if cur == false then
  return {tonumber(ARGV[2]), 0}
end
return {tonumber(cur), 0}
`)

// Agree implements admission.CapacityAgreement over Redis.
func (c *Counters) Agree(ctx context.Context, capacity int, ttl time.Duration) (agreed int, leads bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	first := 0
	if !c.capAgreed.Load() {
		first = 1
	}
	v, err := agreeScript.Run(ctx, c.rdb, []string{c.key + ":cap:lease", c.key + ":cap"},
		c.replica, capacity, max(ttl.Milliseconds(), 1), first).Slice()
	if err != nil {
		return 0, false, err
	}
	if len(v) != 2 {
		return 0, false, fmt.Errorf("capacity agreement: unexpected reply %v", v)
	}
	n, ok1 := v[0].(int64)
	l, ok2 := v[1].(int64)
	if !ok1 || !ok2 || n < 1 {
		return 0, false, fmt.Errorf("capacity agreement: unexpected reply %v", v)
	}
	c.capAgreed.Store(true)
	return int(n), l == 1, nil
}
