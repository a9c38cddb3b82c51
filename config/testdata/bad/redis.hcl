redis {
  address    = "localhost"  # ERROR@col=16: address "localhost" is not host:port
  tls        = "yes"        # ERROR: Inappropriate value for attribute "tls"
  timeout    = "0s"         # ERROR@col=16: timeout must be a positive duration
  replicas   = 0            # ERROR@col=16: replicas must be between 1 and 1000
}
