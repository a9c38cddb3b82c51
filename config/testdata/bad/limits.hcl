# The limits block.
limits {
  max_body_bytes           = 0 # ERROR@col=30: max_body_bytes must be at least 1
  max_header_bytes         = 1.5 # ERROR@col=30: max_header_bytes must be a whole number
  max_response_bytes       = -1 # ERROR: max_response_bytes must be at least 1
  read_header_timeout      = "10" # ERROR@col=30: read_header_timeout: invalid duration "10"
  read_timeout             = 60 # ERROR: read_timeout: invalid duration "60"
  idle_timeout             = "-5s" # ERROR: idle_timeout must be a positive duration
  max_request_duration     = "1 day" # ERROR: max_request_duration: invalid duration
  connect_timeout          = "0s" # ERROR: connect_timeout must be a positive duration
  response_header_timeout  = "10y" # ERROR: response_header_timeout: invalid duration
  stream_idle_timeout      = "-1s" # ERROR@col=30: stream_idle_timeout must not be negative
  retries                  = -1 # ERROR@col=30: retries must be between 0 and 100
  auth_failures_per_minute = -1 # ERROR@col=30: auth_failures_per_minute must be at least 0
  max_connections = -1 # ERROR: max_connections must be at least 0
  max_connections_per_network = "many" # ERROR: max_connections_per_network
}
