# The store block.
store {
  kind           = "oracle" # ERROR@col=20: kind must be one of "sqlite", "postgres", got "oracle"
  path           = "" # ERROR@col=20: path must not be empty
  queue_size     = 0 # ERROR@col=20: queue_size must be at least 1
  batch_size     = -500 # ERROR@col=20: batch_size must be at least 1
  flush_interval = "0s" # ERROR@col=20: flush_interval must be a positive duration
  fail_closed    = 1 # ERROR: Inappropriate value for attribute "fail_closed": bool required, but have number
  retention      = "-2160h" # ERROR@col=20: retention must be a positive duration
  spool_sync     = "sometimes" # ERROR@col=20: spool_sync must be one of "interval", "always", "never", got "sometimes"
}
