# llmflow quick start: two institutions share one simulated vLLM.
# `llmflow quickstart` writes this file, master.key and vllm.key into its data
# directory and starts the simulated engine on 127.0.0.1:8001.
# Relative paths are resolved against the directory of this file.
master_key_file = "master.key"

org "etabA" {
  share = 0.8125
  team "lab-nlp" {}
  team "lab-vision" {}
}
org "etabB" {
  share = 0.1875
  team "lab-chem" {}
}

pool "sim" { capacity = 16 }

model "sim-llama" {
  upstream_model = "sim/llama"
  pool           = "sim"
  key_file       = "vllm.key"
  cost {
    input_per_mtok  = 0.02
    output_per_mtok = 0.20
    cached_per_mtok = 0.002
  }
  upstream "sim0" { base_url = "http://127.0.0.1:8001" }
}

store { path = "llmflow.db" }
