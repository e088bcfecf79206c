package expunpack

//go:generate sh -c "cd ../asmgen && go run ./expunpack -out ../expunpack/unpack_amd64.s -stubs ../expunpack/unpack_stub_amd64.go -pkg expunpack"
