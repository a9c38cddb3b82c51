# The health path is a plain path; lists of strings hold no null.
health {
  path = "/health?full=1" # ERROR@col=10: health path "/health?full=1" must be a plain path
}
tags {
  allowed = ["a", null] # ERROR@col=13: allowed must not contain null
}
