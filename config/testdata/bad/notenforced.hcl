# Blocks that are well formed but not enforced yet are refused, not ignored.
tags { # ERROR@col=1: tags: header is set but allowed is not (list the tags clients may send)
  header = "X-LLMflow-Tags"
}
alerts { # ERROR@col=1: the alerts block is not enforced yet (alerts come with budgets); remove it
  webhook_url = "https://hooks.example.org/llmflow"
}
