# Integers beyond their type.
limits {
  max_body_bytes = 1e30 # ERROR@col=20: max_body_bytes must be at most 9223372036854775807
  retries        = 101 # ERROR@col=20: retries must be between 0 and 100
  stream_idle_timeout = "2 minutes" # ERROR@col=25: stream_idle_timeout: invalid duration "2 minutes"
}
store {
  queue_size = 4294967296 # ERROR@col=16: queue_size must be at most 2147483647
}
