# Blocks that are well formed but not enforced yet are refused, not ignored.
tags { # ERROR@col=1: the tags block is not enforced yet (request tags come from keys only); remove it
  header = "X-LLMflow-Tags"
}
