# The tags block.
tags {
  header  = "X Tags" # ERROR@col=13: tags header "X Tags" is not a valid HTTP header name
  allowed = ["a", "", "b", "a"] # ERROR@col=13: allowed tags must not be empty # ERROR@col=13: duplicate allowed tag "a"
}
