oidc {
  issuer         = "http://idp.example.org/realms/hpc"  # ERROR@col=20: issuer "http://idp.example.org/realms/hpc": want https:// (http:// only for a loopback host)
  client_id      = ""                                   # ERROR: client_id must not be empty
  redirect_url   = "https://llmflow.example.org/cb"     # ERROR: the console's callback is scheme://host[:port]/console/callback
  username_claim = ""                                   # ERROR: username_claim must not be empty
  scopes         = ["profile"]                          # ERROR: scopes must include "openid"
  session_ttl    = "10s"                                # ERROR: session_ttl must be between 1m and 720h
}
self_service {
  keys     = true
  max_keys = -1 # ERROR: max_keys
}
