# A postgres store is named by dsn_file, never by path.
store {
  kind      = "postgres" # ERROR@col=15: kind = "postgres" needs dsn_file
  path      = "llmflow.db" # ERROR@col=15: path is for kind = "sqlite"
  retention = "90d" # ERROR@col=15: retention: invalid duration "90d"
}
