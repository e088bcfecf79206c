package bf16merge

//go:generate sh -c "cd ../../../asmgen && go run ./bf16merge -out ../platform/kernel/bf16merge/merge_amd64.s -stubs ../platform/kernel/bf16merge/merge_stub_amd64.go -pkg bf16merge"
