# Every attribute set, relative and absolute paths.
master_key_file     = "/etc/llmflow/master.key"
metrics_token_file  = "secrets/metrics.token"
cache_salt_key_file = "../secrets/salt.key"

org "a" {
  share = 0.75
  team "t1" { share = 0.5 }
  team "t2" {}
}
org "b" { share = 0.25 }
org "borrower" { share = 0 }

pool "p" {
  capacity      = 1048576
  scheduler     = "gateway"
  priority_via  = "header"
  queue_timeout = "2m"
  queue_size    = 50
}
pool "q" {
  capacity     = 1
  priority_via = "body"
}

model "batchy" {
  pool  = "q"
  class = "batch"
  max_context_tokens = 131072
  upstream "u1" {
    base_url = "https://gpu.example.org:8443/vllm/"
    key_file = "u1.key"
  }
  upstream "u2" { base_url = "http://[fd00::1]:8000" }
}

store {
  kind           = "postgres"
  dsn_file       = "dsn"
  fail_closed    = false
  queue_size     = 100
  batch_size     = 10
  flush_interval = "250ms"
  retention      = "720h"
}

fairshare { half_life = "24h" }

limits {
  max_body_bytes           = 1048576
  max_header_bytes         = 16384
  max_response_bytes       = 32 * 1024 * 1024
  read_header_timeout      = "5s"
  read_timeout             = "30s"
  idle_timeout             = "90s"
  max_request_duration     = "1h"
  connect_timeout          = "1s"
  response_header_timeout  = "15m"
  stream_idle_timeout      = "0"
  retries                  = 0
  auth_failures_per_minute = 0
  max_connections          = 100
  max_connections_per_network = 0
}

health {
  interval = "5s"
  timeout  = "1s"
  cooldown = "1m"
  path     = "/v1/models"
}
