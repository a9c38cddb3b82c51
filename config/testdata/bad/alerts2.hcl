# Alerts: token without URL, SMTP without its required attributes.
alerts {
  webhook_token_file = "webhook.token" # ERROR@col=24: webhook_token_file is set but webhook_url is not
  smtp { # ERROR: The argument "server" is required # ERROR: The argument "from" is required # ERROR: The argument "to" is required
    password_file = "smtp.pass" # ERROR@col=21: smtp password_file is set but username is not
  }
}
