# Alerts with nowhere to send, and an unknown TLS mode.
alerts { # ERROR@col=1: alerts has nowhere to send: set webhook_url or an smtp block
  soft_limit_percent = 50
}
