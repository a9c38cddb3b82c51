# Unknown attributes and blocks, wrong types and missing labels are HCL's
# own diagnostics.
master_key = "x" # ERROR@col=1: Unsupported argument; An argument named "master_key" is not expected here.
listener {} # ERROR@col=1: Unsupported block type

pool "p" {
  capacity = "lots" # ERROR@col=14: Inappropriate value for attribute "capacity": a number is required
  burst    = 3 # ERROR@col=3: Unsupported argument
}
pool { # ERROR@col=6: Missing name for pool
  capacity = 1
}

org "a" {
  share = true # ERROR@col=11: Inappropriate value for attribute "share": number required, but have bool
  team "t" "u" {} # ERROR@col=12: Extraneous label for team
}

model "m" {
  pool = "p"
  upstream "u" {
    base_url = ["http://a"] # ERROR: Inappropriate value for attribute "base_url": string required
  }
}

store {
  fail_closed = "maybe" # ERROR@col=17: Inappropriate value for attribute "fail_closed": a bool is required
}

tags {
  header  = "X-Tags"
  allowed = "a" # ERROR: Inappropriate value for attribute "allowed": list of string required
}

limits {
  retries = null # ERROR@col=13: retries must not be null
}

