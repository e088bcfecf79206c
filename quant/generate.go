package quant

//go:generate sh -c "cd ../internal/asmgen && go run ./mxfp4 -out ../../quant/mxfp4_amd64.s -stubs ../../quant/mxfp4_stub_amd64.go -pkg quant"
