package redisstate

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// pipe sends the scripts of a replica's admissions and releases to Redis
// in the order they were handed to it, as pipelines: whatever was handed
// over while the previous pipeline was on its way goes in the next one,
// so that concurrent requests share round trips (auto-pipelining, as
// rueidis does). A release is handed over and not waited for (send): the
// client's answer does not wait for Redis. An admission waits for its
// answer (do), and, being later in the order, runs after every release
// handed over before it: a key's request that ended before the next one
// began is given back before that one is admitted, as when each release
// waited. Settle calls nobody waits for (settleKinds) linger
// (settleLinger) even while a pipeline is on its way, unless a call that
// cannot wait comes: then they go with it.
//
// One goroutine sends, so one pipeline is in flight at a time: each op
// waits at most for the pipeline before it and its own. What Redis
// answers is handed back on that goroutine (then) or to the waiting
// caller.
type pipe struct {
	rdb redis.UniversalClient

	// loaded are the scripts Redis was sent (EVAL the first time, EVALSHA
	// then, so that no call runs out of order); only the sending
	// goroutine reads it
	loaded map[*redis.Script]bool

	mu     sync.Mutex
	queue  []*pipeOp
	spare  []*pipeOp
	closed bool
	kick   chan struct{}
	done   chan struct{}

	// linger: a settle call nobody waits for (settleKinds) waits that
	// long for others to share its script (batch.go), unless a call
	// that is waited for, or of another kind, comes first; armed while
	// the timer runs for the queue
	linger time.Duration
	timer  *time.Timer
	armed  bool
	// due: the linger is over; urgent: a call that does not linger was
	// handed over. Without either, calls that came while a batch was on
	// its way wait for their linger too.
	due, urgent bool

	// fold: settle calls of one shape in a batch go as one (fold.go)
	fold bool
}

// settleLinger is how long a settle call nobody waits for may wait for
// others: at a few thousand requests a second, the ends and counts of
// tens of requests go as one script (folded, fold.go) and wake the pipe
// and Redis once. What it delays is only seen by other replicas, and errs
// on the safe side: an end (a place, a hold given back) is seen a moment
// late; a count in flight of a request placed from a quota, whose place
// is already counted within. At c=16, 2 ms measured Redis at 10–14 µs of
// CPU a request and the gateway with Redis about 5 % cheaper than 1 ms
// (13–18 µs); the room other replicas' borrowers follow is read every
// 10 ms anyway.
const settleLinger = 2 * time.Millisecond

// pipeOp is one script call: then (nil: none) receives the answer on the
// pipe's goroutine; wait, when not nil, receives it instead.
type pipeOp struct {
	script  *redis.Script
	keys    []string
	args    []any
	timeout time.Duration
	then    func(*redis.Cmd)
	wait    chan *redis.Cmd
}

// newPipe starts the pipe of rdb; close stops it.
func newPipe(rdb redis.UniversalClient) *pipe {
	p := &pipe{rdb: rdb, kick: make(chan struct{}, 1), done: make(chan struct{}), loaded: map[*redis.Script]bool{}, linger: settleLinger, fold: true}
	p.timer = time.AfterFunc(time.Hour, p.lingered)
	p.timer.Stop()
	go p.run()
	return p
}

// send hands a script call over, its answer for then (nil: none), and
// returns at once. After close it runs the call on a goroutine of its own.
func (p *pipe) send(s *redis.Script, keys []string, args []any, timeout time.Duration, then func(*redis.Cmd)) {
	op := &pipeOp{script: s, keys: keys, args: args, timeout: timeout, then: then}
	if !p.enqueue(op) {
		go p.execAlone(op) // its caller may hold what then takes
	}
}

// call is do, its answer handed to then here, when wait is true; else
// send.
func (p *pipe) call(s *redis.Script, keys []string, args []any, timeout time.Duration, wait bool, then func(*redis.Cmd)) {
	if wait {
		then(p.do(s, keys, args, timeout))
		return
	}
	p.send(s, keys, args, timeout, then)
}

// waits recycles the channels of do.
var waits = sync.Pool{New: func() any { return make(chan *redis.Cmd, 1) }}

// do runs a script call after every call handed over before it, and
// returns its answer.
func (p *pipe) do(s *redis.Script, keys []string, args []any, timeout time.Duration) *redis.Cmd {
	w := waits.Get().(chan *redis.Cmd)
	op := &pipeOp{script: s, keys: keys, args: args, timeout: timeout, wait: w}
	if !p.enqueue(op) {
		p.execAlone(op)
	}
	cmd := <-w
	waits.Put(w)
	return cmd
}

// barrier returns when every call handed over before it has been answered.
func (p *pipe) barrier() {
	w := make(chan struct{})
	op := &pipeOp{then: func(*redis.Cmd) { close(w) }}
	if p.enqueue(op) {
		<-w
	}
}

func (p *pipe) enqueue(op *pipeOp) bool {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	p.queue = append(p.queue, op)
	if p.linger > 0 && op.wait == nil && settleKinds[op.script] != 0 {
		arm := !p.armed
		p.armed = true
		p.mu.Unlock()
		if arm {
			p.timer.Reset(p.linger)
		}
		return true
	}
	p.urgent = true
	p.mu.Unlock()
	p.poke()
	return true
}

// lingered is the timer's: the settle calls waiting go now.
func (p *pipe) lingered() {
	p.mu.Lock()
	p.due = true
	p.mu.Unlock()
	p.poke()
}

// poke wakes the sending goroutine.
func (p *pipe) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// close sends what was handed over and stops the pipe; later calls run
// where they are made.
func (p *pipe) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.done
		return
	}
	p.closed = true
	p.mu.Unlock()
	if p.timer != nil {
		p.timer.Stop()
	}
	p.poke()
	<-p.done
}

func (p *pipe) run() {
	defer close(p.done)
	for {
		<-p.kick
		for {
			p.mu.Lock()
			if len(p.queue) == 0 || !p.due && !p.urgent && !p.closed {
				// nothing, or settle calls whose linger runs
				closed := p.closed
				p.mu.Unlock()
				if closed {
					return
				}
				break
			}
			batch := p.queue
			p.queue, p.spare = p.spare[:0], nil
			p.armed, p.due, p.urgent = false, false, false // the next settle call arms the timer again
			p.mu.Unlock()
			p.exec(batch)
			clear(batch)
			p.mu.Lock()
			if p.spare == nil {
				p.spare = batch[:0]
			}
			p.mu.Unlock()
		}
	}
}

// execAlone runs op after close, not on the sending goroutine: with
// EVALSHA then EVAL.
func (p *pipe) execAlone(op *pipeOp) {
	q := &pipe{rdb: p.rdb}
	q.exec([]*pipeOp{op})
}

// exec sends batch as one pipeline (EVALSHA; the calls whose script Redis
// does not have yet go again as EVAL, which loads it) and hands the
// answers back in order.
func (p *pipe) exec(batch []*pipeOp) {
	batch = mergeSettles(batch, p.fold)
	timeout := time.Duration(0)
	n := 0
	for _, op := range batch {
		if op.script != nil {
			timeout = max(timeout, op.timeout)
			n++
		}
	}
	cmds := make([]*redis.Cmd, len(batch))
	if n > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		pl := p.rdb.Pipeline()
		for i, op := range batch {
			switch {
			case op.script == nil:
			case p.loaded != nil && !p.loaded[op.script]:
				// EVAL caches the script in Redis (not Script.Load: on a
				// pipeline it would forget the script's hash)
				cmds[i] = op.script.Eval(ctx, pl, op.keys, op.args...)
				p.loaded[op.script] = true
			default:
				cmds[i] = op.script.EvalSha(ctx, pl, op.keys, op.args...)
			}
		}
		_, _ = pl.Exec(ctx)
		// Redis lost its scripts (a restart): these run again, after the
		// others of the batch
		var again redis.Pipeliner
		for i, op := range batch {
			if c := cmds[i]; c != nil && redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
				if again == nil {
					again = p.rdb.Pipeline()
					if p.loaded != nil {
						clear(p.loaded)
					}
				}
				cmds[i] = op.script.Eval(ctx, again, op.keys, op.args...)
			}
		}
		if again != nil {
			_, _ = again.Exec(ctx)
		}
		cancel()
	}
	for i, op := range batch {
		op.answer(cmds[i])
	}
}
