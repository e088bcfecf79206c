package expunpack

//go:generate sh -c "cd ../../../asmgen && go run ./expunpack -out ../platform/kernel/expunpack/unpack_amd64.s -stubs ../platform/kernel/expunpack/unpack_stub_amd64.go -pkg expunpack"
