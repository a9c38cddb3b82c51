# A sqlite store (the default kind) has no DSN.
store {
  path     = "llmflow.db"
  dsn_file = "/etc/llmflow/dsn" # ERROR@col=14: dsn_file is for kind = "postgres"
}
