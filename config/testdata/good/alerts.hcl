# Soft-budget alerts to a webhook and by e-mail.
alerts {
  webhook_url        = "https://hooks.example.org/llmflow"
  webhook_token_file = "webhook.token"
  timeout            = "5s"
  soft_limit_percent = 75
  smtp {
    server        = "smtp.example.org:587"
    from          = "llmflow@example.org"
    to            = ["hpc-admins@example.org"]
    username      = "llmflow"
    password_file = "smtp.pass"
  }
}
