# An unknown TLS mode; a plain relay on loopback with credentials is fine.
alerts {
  smtp {
    server = "127.0.0.1:2525"
    from   = "llmflow@example.org"
    to     = ["ops@example.org"]
    tls    = "ssl" # ERROR@col=14: tls must be one of "starttls", "implicit", "none", got "ssl"
  }
}
