redis {
  address  = "10.0.0.5:6379"
  replicas = 2.5   # ERROR@col=14: replicas must be a whole number
}
