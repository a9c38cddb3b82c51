slurm {
  source   = "sacctmgr"
  cluster  = "hgx"
  dsn_file = "slurm.dsn" # ERROR@col=14: dsn_file is only for source "slurmdbd"
}
slurm { # ERROR: slurm
  source  = "sacctmgr"
  cluster = "hgx"
}
