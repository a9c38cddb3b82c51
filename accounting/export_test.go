package accounting

// Wakeups is how many times q's writer goroutine has woken up.
func Wakeups(q *Queue) uint64 { return q.wakeups.Load() }
