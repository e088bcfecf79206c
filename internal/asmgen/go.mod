module github.com/k3go/k3/internal/asmgen

go 1.26.0

replace github.com/k3go/k3 => ../..

require github.com/mmcloughlin/avo v0.6.0

require (
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/tools v0.52.0 // indirect
)
