# Duplicate labels and repeated single blocks.
org "a" {
  share = 0.5
  team "t1" {}
  team "t1" {} # ERROR@col=8: duplicate team "t1"
}
org "a" { # ERROR@col=5: duplicate org "a"; previously defined at testdata/bad/duplicates.hcl:2:5
  share = 0.1
  team "t2" {}
}
org "b" {
  share = 0.1
  team "t2" {} # ERROR@col=8: duplicate team "t2"
}

pool "p" { capacity = 1 }
pool "p" { capacity = 2 } # ERROR@col=6: duplicate pool "p"

model "m" {
  pool = "p"
  upstream "u" { base_url = "http://a" }
  upstream "u" { base_url = "http://b" } # ERROR@col=12: duplicate upstream "u"
  cost {}
  cost {} # ERROR@col=3: duplicate cost block
}
model "m" { # ERROR@col=7: duplicate model "m"
  pool = "p"
  upstream "u" { base_url = "http://a" }
}

store {}
store {} # ERROR@col=1: duplicate store block; only one is allowed, the first is at testdata/bad/duplicates.hcl:31:1
fairshare {}
fairshare {} # ERROR: duplicate fairshare block
limits {}
limits {} # ERROR: duplicate limits block
health {}
health {} # ERROR: duplicate health block
tags {}
tags {} # ERROR: duplicate tags block
alerts {
  smtp {
    server = "smtp.example.org:25"
    from   = "llmflow@example.org"
    to     = ["ops@example.org"]
  }
  smtp { # ERROR@col=3: duplicate smtp block
    server = "smtp.example.org:25"
    from   = "llmflow@example.org"
    to     = ["ops@example.org"]
  }
}
alerts {} # ERROR: duplicate alerts block
