# The slurm block.
slurm {
  source   = "ldap"         # ERROR@col=14: source must be one of "slurmdbd", "sacctmgr", got "ldap"
  cluster  = "HGX"          # ERROR@col=14: cluster "HGX" is not a Slurm cluster name
  schedule = "every monday" # ERROR@col=14: schedule "every monday"
  timeout  = "-1s"          # ERROR@col=14: timeout must be a positive duration
}
