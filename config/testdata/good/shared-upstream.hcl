# Two models of one pool served by the same engine under one upstream name,
# and the same name in another pool for another engine: both allowed.
master_key_file = "master.key"
org "a" {
  share = 1
  team "t" {}
}
pool "p" { capacity = 4 }
pool "q" { capacity = 4 }
model "chat" {
  pool     = "p"
  key_file = "vllm.key"
  upstream "u1" { base_url = "http://127.0.0.1:1" }
}
model "chat-batch" {
  pool     = "p"
  class    = "batch"
  key_file = "vllm.key"
  upstream "u1" { base_url = "http://127.0.0.1:1" }
}
model "other" {
  pool     = "q"
  key_file = "vllm.key"
  upstream "u1" { base_url = "http://127.0.0.1:2" }
}
