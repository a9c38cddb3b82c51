# The file is evaluated statically: no variables, no functions.
master_key_file     = env.HOME # ERROR@col=23: Variables not allowed
metrics_token_file  = file("/etc/shadow") # ERROR@col=23: Function calls not allowed
cache_salt_key_file = "/etc/${x}/salt" # ERROR@col=31: Variables not allowed

pool "p" {
  capacity = var.capacity # ERROR@col=14: Variables not allowed
}

model "m" {
  pool           = "p"
  upstream_model = "org/${name}" # ERROR: Variables not allowed
  upstream "u" {
    base_url = "http://${host}:8000" # ERROR: Variables not allowed
  }
}

fairshare {
  half_life = "${24 * 7}h" # constant interpolation is an expression, not a variable: accepted
}
