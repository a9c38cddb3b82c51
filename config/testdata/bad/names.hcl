# Empty names and empty paths.
master_key_file = "" # ERROR@col=19: master_key_file must not be empty
org "" { # ERROR@col=5: org name must not be empty
  share = 0.1
  team "" {} # ERROR@col=8: team name must not be empty
}
pool "p" { capacity = 1 }
model "" { # ERROR@col=7: model name must not be empty
  pool = "p"
  upstream "" { base_url = "http://a" } # ERROR@col=12: upstream name must not be empty
}
