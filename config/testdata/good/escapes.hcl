# $${ and %%{ are literal ${ and %{; a lone $ or % needs no escape.
master_key_file = "/etc/llmflow/100%/$HOME"

pool "p" { capacity = 1 }

model "m-$${x}" {
  upstream_model = "org/%%{name}-$${v}"
  pool           = "p"
  key_file       = "/etc/llmflow/$${weird}/%%{key}"
  upstream "u" { base_url = "http://10.0.0.1:8000/$${prefix}/100%25/" }
}
