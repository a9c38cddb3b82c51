# slurmdbd needs a DSN; sacctmgr takes none.
slurm { # ERROR@col=1: slurm source "slurmdbd" needs dsn_file
  source  = "slurmdbd"
  cluster = "hgx"
}
