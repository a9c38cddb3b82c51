# Alerts: webhook URL with a query, SMTP addresses that could inject headers.
alerts {
  webhook_url = "https://hooks.example.org/x?token=abc" # ERROR: webhook_url: URL must not have a query
  smtp {
    server = "[::1]:25x" # ERROR: port must be between 1 and 65535
    from   = "a@b.org"
    to     = ["ops@example.org", "x@y.org\r\nBcc: evil@example.org"] # ERROR: smtp to: invalid e-mail address
  }
}
