# Within a pool an upstream name is one engine: two models may share an
# engine under one name, not give one name to two engines.
pool "p" { capacity = 2 }
pool "q" { capacity = 2 }
model "a" {
  pool = "p"
  upstream "u1" { base_url = "http://10.0.0.1:8000" }
  upstream "u2" { base_url = "http://10.0.0.2:8000" }
}
model "b" {
  pool = "p"
  upstream "u2" { base_url = "http://10.0.0.2:8000" } # the same engine: fine
  upstream "u1" { base_url = "http://10.0.0.3:8000" } # ERROR@col=12: upstream "u1" of model "b" is http://10.0.0.3:8000, but in pool "p" that name is already http://10.0.0.1:8000 (model "a", at testdata/bad/upstreams.hcl:7:12)
}
model "c" {
  pool = "q"
  upstream "u1" { base_url = "http://10.0.0.4:8000" } # another pool: fine
}
