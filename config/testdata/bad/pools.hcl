# Pool capacity and enums.
pool "zero" { capacity = 0 } # ERROR@col=26: capacity must be between 1 and 1048576
pool "huge" { capacity = 1048577 } # ERROR@col=26: capacity must be between 1 and 1048576
pool "half" { capacity = 1.5 } # ERROR@col=26: capacity must be a whole number
pool "exp" { capacity = 1e300 } # ERROR: capacity must be between 1 and 1048576
pool "max" { capacity = 1048576 }
pool "sched" {
  capacity  = 4
  scheduler = "lottery" # ERROR@col=15: scheduler must be one of "priority", "fcfs", "gateway", got "lottery"
}
pool "via" {
  capacity     = 4
  priority_via = "pigeon" # ERROR@col=18: priority_via must be one of "both", "header", "body"
}
pool "queue" {
  capacity      = 4
  scheduler     = "gateway"
  queue_timeout = "0s" # ERROR@col=19: queue_timeout must be a positive duration
  queue_size    = 0    # ERROR@col=19: queue_size must be between 1 and 16777216
}
pool "none" {} # ERROR: Missing required argument; The argument "capacity" is required
pool "" { capacity = 1 } # ERROR@col=6: pool name must not be empty
pool "reclaim" {
  capacity = 4
  reclaim  = "steal" # ERROR@col=14: reclaim must be one of "preempt", "holdback", "none", got "steal"
}
pool "fcfs-preempt" {
  capacity  = 4
  scheduler = "fcfs"
  reclaim   = "preempt" # ERROR@col=15: reclaim = "preempt" needs an engine that resumes a request from its answer so far (scheduler "priority" or "gateway"); the openai-compatible engines of this pool do not: use "holdback" or "none"
}
pool "headroom" {
  capacity = 4
  reclaim  = "holdback"
  headroom = 4 # ERROR@col=14: headroom must be less than the pool's capacity (4): borrowers need a slot
}
pool "headroom-neg" {
  capacity = 4
  headroom = -1 # ERROR@col=14: headroom must be between 0 and 1048576
}
pool "kind" {
  capacity = 4
  engine   = "tgi" # ERROR@col=14: engine must be one of "vllm", "sglang", "llama-server", "openai", got "tgi"
}
pool "llama-priority" {
  capacity  = 4
  engine    = "llama-server"
  scheduler = "priority" # ERROR@col=15: llama-server has no priority scheduler: use scheduler "gateway" (the default) or "fcfs"
}
pool "vllm-order" {
  capacity       = 4
  engine         = "vllm"
  priority_order = "high_first" # ERROR@col=20: priority_order is a setting of SGLang, not of vllm
}
pool "sglang-via" {
  capacity     = 4
  engine       = "sglang"
  priority_via = "header" # ERROR@col=18: priority_via is a setting of vLLM's priority scheduler, not of sglang with scheduler "priority"
}
