package redisstate

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow/admission"
	"github.com/redis/go-redis/v9"
)

// Reclaim is admission.Reclaim over Redis: one counter of outstanding
// asks per pool (expiring askTTL after the last ask) and an announcement
// on the replicas' Bus channel, which every replica's Receiver gets
// (Receiver.Reclaim); a replica that claims an ask (decrements the counter
// while it is positive, in one script) preempts one of its borrowers.
type Reclaim struct {
	rdb     redis.UniversalClient
	key     string // the pool's ask counter
	channel string // the Bus's
	pool    string
	timeout time.Duration
	log     *slog.Logger
}

var _ admission.Reclaim = (*Reclaim)(nil)

// askTTL is how long asks stay claimable: a request that waited longer got
// its slot from a borrower that finished, or ended.
const askTTL = 3 * time.Second

// msgReclaim starts a reclaim announcement: msgReclaim pool US prio US org
// (US is the ASCII unit separator, in no pool or account name).
const msgReclaim = "reclaim\x1f"

var askScript = redis.NewScript(`
local n = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return n`)

var claimScript = redis.NewScript(`
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n > 0 then
  redis.call('DECR', KEYS[1])
  return 1
end
return 0`)

// NewReclaim returns the reclaim exchange of pool, announced on channel.
func NewReclaim(rdb redis.UniversalClient, prefix, channel, pool string, timeout time.Duration, log *slog.Logger) *Reclaim {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Reclaim{rdb: rdb, key: prefix + "reclaim:" + pool, channel: channel, pool: pool, timeout: timeout, log: log}
}

func (r *Reclaim) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), r.timeout)
}

// Ask implements admission.Reclaim.
func (r *Reclaim) Ask(org string, prio int) {
	ctx, cancel := r.ctx()
	defer cancel()
	if err := askScript.Run(ctx, r.rdb, []string{r.key}, askTTL.Milliseconds()).Err(); err != nil {
		r.log.Warn("slot not asked of the other replicas (redis)", "pool", r.pool, "err", err)
		return
	}
	msg := msgReclaim + r.pool + "\x1f" + strconv.Itoa(prio) + "\x1f" + org
	if err := r.rdb.Publish(ctx, r.channel, msg).Err(); err != nil {
		r.log.Warn("slot not asked of the other replicas (redis)", "pool", r.pool, "err", err)
	}
}

// Claim implements admission.Reclaim.
func (r *Reclaim) Claim() bool {
	ctx, cancel := r.ctx()
	defer cancel()
	n, err := claimScript.Run(ctx, r.rdb, []string{r.key}).Int()
	return err == nil && n == 1
}

// Unclaim implements admission.Reclaim.
func (r *Reclaim) Unclaim() {
	ctx, cancel := r.ctx()
	defer cancel()
	askScript.Run(ctx, r.rdb, []string{r.key}, askTTL.Milliseconds())
}

// parseReclaim reads a reclaim announcement; ok is false for another
// message.
func parseReclaim(payload string) (pool, org string, prio int, ok bool) {
	rest, found := strings.CutPrefix(payload, msgReclaim)
	if !found {
		return "", "", 0, false
	}
	parts := strings.SplitN(rest, "\x1f", 3)
	if len(parts) != 3 {
		return "", "", 0, false
	}
	prio, err := strconv.Atoi(parts[1])
	if err != nil {
		return "", "", 0, false
	}
	return parts[0], parts[2], prio, true
}
