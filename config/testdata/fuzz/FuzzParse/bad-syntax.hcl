go test fuzz v1
[]byte("# A syntax error stops decoding: only the parser's diagnostic is reported.\npool \"p\" {\n  capacity = # ERROR@col=14: Invalid expression\n}\nmaster_key_file = \"a\"\nmaster_key_file = \"b\" # ERROR@col=1: Attribute redefined; The argument \"master_key_file\" was already set at testdata/bad/syntax.hcl:5,1-16\n")
