tls {   # ERROR@col=5: The argument "key_file" is required
  cert_file = "gw.crt"
}
