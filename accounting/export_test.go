package accounting

// Wakeups is how many times q's writer goroutine has woken up.
func Wakeups(q *Queue) uint64 { return q.wakeups.Load() }

// Mirroring reports whether q's writer takes the spooled records from
// memory (the mirror) rather than reading them back.
func Mirroring(q *Queue) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.mirroring
}
