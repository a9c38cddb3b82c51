# llmflow gateway: two institutions share a 4-node HGX B300 cluster.
# Validate: llmflow check-config -c examples/gateway.hcl (without the secret files: --syntax-only)
master_key_file = "/etc/llmflow/master.key"

org "etabA" {
  share = 0.8125
  team "lab-nlp" {}
  team "lab-vision" {}
}
org "etabB" {
  share = 0.1875
  team "lab-chem" {}
}

pool "b300" { capacity = 256 }
# or measured from the engines' /metrics (README, "Capacity from the engines"):
# pool "b300" {
#   capacity = "auto"
#   min      = 64
#   max      = 512
# }

model "llama-3.3-70b" {
  upstream_model = "meta-llama/Llama-3.3-70B-Instruct"
  pool           = "b300"
  class          = "interactive"
  key_file       = "/etc/llmflow/vllm.key"
  cost {
    input_per_mtok  = 0.02
    output_per_mtok = 0.20
    cached_per_mtok = 0.002
  }
  upstream "gpu01" { base_url = "http://10.0.0.11:8000" }
  upstream "gpu02" {
    base_url = "http://10.0.0.12:8000"
    key_file = "/etc/llmflow/gpu02.key"
  }
}
