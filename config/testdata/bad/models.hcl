# Models: pool, class, upstreams, URLs, cost.
pool "p" { capacity = 8 }

model "unknown-pool" {
  pool = "gpu" # ERROR@col=10: unknown pool "gpu"
  upstream "u" { base_url = "http://10.0.0.1:8000" }
}
model "no-upstream" { # ERROR@col=7: model "no-upstream" has no upstream block
  pool = "p"
}
model "no-pool" { # ERROR: Missing required argument; The argument "pool" is required
  upstream "u" { base_url = "http://10.0.0.1:8000" }
}
model "class" {
  pool  = "p"
  class = "realtime" # ERROR@col=11: class must be one of "interactive", "batch", got "realtime"
  upstream "u" { base_url = "http://10.0.0.1:8000" }
}
model "cost" {
  pool = "p"
  cost {
    input_per_mtok  = -1 # ERROR@col=23: input_per_mtok must be a finite number ≥ 0
    output_per_mtok = 1e400 # ERROR@col=23: output_per_mtok must be a finite number ≥ 0
    cached_per_mtok = "cheap" # ERROR: a number is required
    gpu_per_mtok    = 1 # ERROR@col=5: Unsupported argument
  }
  upstream "u" { base_url = "http://10.0.0.1:8000" }
}
model "urls" {
  pool     = "p"
  key_file = "" # ERROR@col=14: key_file must not be empty
  upstream "scheme" { base_url = "ftp://10.0.0.1/" } # ERROR@col=34: base_url: URL scheme must be http or https
  upstream "relative" { base_url = "/v1" } # ERROR@col=36: base_url: URL scheme must be http or https
  upstream "nohost" { base_url = "http:///v1" } # ERROR@col=34: base_url: URL must have a host
  upstream "opaque" { base_url = "http:10.0.0.1" } # ERROR: base_url: URL must have a host
  upstream "creds" { base_url = "https://vllm:hunter2@10.0.0.1" } # ERROR@col=33: base_url: URL must not contain credentials
  upstream "query" { base_url = "http://10.0.0.1:8000/?a=b" } # ERROR@col=33: base_url: URL must not have a query
  upstream "fragment" { base_url = "http://10.0.0.1:8000/#x" } # ERROR: base_url: URL must not have a fragment
  upstream "port" { base_url = "http://10.0.0.1:0" } # ERROR: base_url: URL port must be between 1 and 65535
  upstream "bad" { base_url = "http://10.0.0.1:80:80" } # ERROR: base_url: invalid URL
  upstream "missing" {} # ERROR: Missing required argument; The argument "base_url" is required
}
model "context" {
  pool               = "p"
  max_context_tokens = 0 # ERROR@col=24: max_context_tokens must be at least 1
  upstream "u" { base_url = "http://10.0.0.1:8000" }
}
model "context2" {
  pool               = "p"
  max_context_tokens = 1e10 # ERROR@col=24: max_context_tokens must be at most 4294967296
  upstream "u" { base_url = "http://10.0.0.1:8000" }
}
model "context3" {
  pool               = "p"
  max_context_tokens = "lots" # ERROR: Incorrect attribute value type
  upstream "u" { base_url = "http://10.0.0.1:8000" }
}
model "output" {
  pool               = "p"
  max_context_tokens = 1000
  max_output_tokens  = 2000 # ERROR@col=24: max_output_tokens (2000) is more than max_context_tokens (1000)
  upstream "u" { base_url = "http://10.0.0.1:8000" }
}
model "output0" {
  pool              = "p"
  max_output_tokens = 0 # ERROR@col=23: max_output_tokens must be
  upstream "u" { base_url = "http://10.0.0.1:8000" }
}
