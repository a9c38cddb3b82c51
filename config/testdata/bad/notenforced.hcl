# Blocks that are well formed but not enforced yet are refused, not ignored.
tags { # ERROR@col=1: tags: header is set but allowed is not (list the tags clients may send)
  header = "X-LLMflow-Tags"
}
