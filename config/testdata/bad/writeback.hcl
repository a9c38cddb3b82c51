writeback {
  dsn_file     = "rw.dsn"
  cluster      = "LLM"          # ERROR@col=18: cluster "LLM" is not a Slurm cluster name
  service_user = "x y"          # ERROR@col=18: service_user "x y" is not a user name
  schedule     = "hourly"       # ERROR@col=18: schedule "hourly"
  lookback     = "10m"          # ERROR@col=18: lookback must be at least one hour
  timezone     = "Mars/Olympus" # ERROR@col=18: timezone "Mars/Olympus"
}
