# Alerts: secrets that would cross the network in clear, bad options.
alerts {
  webhook_url        = "http://hooks.example.org/llmflow"
  webhook_token_file = "webhook.token" # ERROR@col=24: webhook_token_file needs an https webhook_url
  timeout            = "0s" # ERROR@col=24: timeout must be a positive duration
  soft_limit_percent = 120 # ERROR@col=24: soft_limit_percent must be between 0 and 100
  smtp {
    server        = "smtp.example.org:25"
    from          = "llmflow@example.org"
    to            = ["ops@example.org"]
    username      = "llmflow"
    password_file = "smtp.pass"
    tls           = "none" # ERROR@col=21: smtp tls = "none" with a username would send the password in clear
    ca_file       = "ca.pem" # ERROR@col=21: smtp ca_file is for tls = "starttls" or "implicit"
  }
}
