module github.com/k3go/k3

go 1.26
