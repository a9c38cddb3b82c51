# The health block.
health {
  interval = "fast" # ERROR@col=14: interval: invalid duration "fast"
  timeout  = "0s" # ERROR@col=14: timeout must be a positive duration
  cooldown = "-1m" # ERROR: cooldown must be a positive duration
  path     = "health" # ERROR@col=14: health path "health" must start with "/"
}
