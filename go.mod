module github.com/k3go/k3

go 1.26.0

require golang.org/x/sys v0.50.0

require (
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/klauspost/cpuid/v2 v2.4.2 // indirect
	golang.org/x/exp v0.0.0-20261113113407-e3970619a1a4 // indirect
	golang.org/x/sync v0.25.0 // indirect
)
