module github.com/k3go/k3

go 1.26.0

require golang.org/x/sys v0.50.0

require github.com/dlclark/regexp2/v2 v2.13.0 // test-only: cross-checks the hand-written pre-tokenizer
