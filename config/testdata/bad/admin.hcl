admin {
  listen          = "9090"                                       # ERROR@col=21: listen "9090": want host:port
  allowed_origins = ["https://console.example.org/app", "HTTPS://X.ORG", "https://c.example.org/", "https://c.example.org?"] # ERROR: "https://console.example.org/app": an origin is scheme://host[:port] # ERROR: "HTTPS://X.ORG" # ERROR: "https://c.example.org/": an origin # ERROR: "https://c.example.org?": an origin
}
