# Organisation and team shares.
org "a" {
  share = 1.5 # ERROR@col=11: share must be between 0 and 1
}
org "b" {
  share = -0.1 # ERROR@col=11: share must be between 0 and 1
}
org "c" {
  share = 0.5 + 0.25
  team "t1" { share = 2 } # ERROR@col=23: share must be between 0 and 1
  team "t2" { share = 0.75 }
  team "t3" { share = 0.5 } # ERROR@col=23: team shares of org "c" sum to 1.25, more than 1
  team "t4" {}
}
org "d" {
  share = 0.5 # ERROR@col=11: org shares sum to 1.25, more than 1
}
org "e" {} # ERROR: Missing required argument; The argument "share" is required
