# The alerts block.
alerts {
  webhook_url = "https://bot:s3cret@hooks.example.org/x" # ERROR@col=17: webhook_url: URL must not contain credentials
  smtp {
    server   = "smtp.example.org" # ERROR@col=16: smtp server "smtp.example.org": want host:port
    from     = "llmflow" # ERROR@col=16: smtp from: invalid e-mail address "llmflow"
    to       = [] # ERROR@col=16: smtp to must list at least one address
    username = "llmflow" # ERROR@col=16: smtp username is set but password_file is not
  }
}
