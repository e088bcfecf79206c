package lib_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// targets lists each generator with the files it owns, relative to the
// asmgen module root.
var targets = []struct{ gen, pkg, asm, stubs string }{
	{"./gemm", "gemm", "../platform/kernel/gemm/gemm_amd64.s", "../platform/kernel/gemm/gemm_stub_amd64.go"},
	{"./mxfp4", "quant", "../../quant/mxfp4_amd64.s", "../../quant/mxfp4_stub_amd64.go"},
	{"./bf16merge", "bf16merge", "../platform/kernel/bf16merge/merge_amd64.s", "../platform/kernel/bf16merge/merge_stub_amd64.go"},
	{"./expunpack", "expunpack", "../platform/kernel/expunpack/unpack_amd64.s", "../platform/kernel/expunpack/unpack_stub_amd64.go"},
	// arm64 NEON (hand-rolled generator: avo has no arm64 back end).
	{"./neon", "gemm", "../platform/kernel/gemm/neon_arm64.s", "../platform/kernel/gemm/neon_stub_arm64.go"},
	{"./neon", "quant", "../../quant/mxfp4_arm64.s", "../../quant/mxfp4_stub_arm64.go"},
	{"./neon", "bf16merge", "../platform/kernel/bf16merge/merge_arm64.s", "../platform/kernel/bf16merge/merge_stub_arm64.go"},
}

// TestRegenerate regenerates every assembly file and stub and fails if the
// result differs from the committed file (the header line, which records the
// command line, is ignored).
func TestRegenerate(t *testing.T) {
	tmp := t.TempDir()
	for _, tg := range targets {
		asm, stubs := filepath.Join(tmp, tg.pkg+".s"), filepath.Join(tmp, tg.pkg+"_stub.go")
		cmd := exec.Command("go", "run", tg.gen, "-out", asm, "-stubs", stubs, "-pkg", tg.pkg)
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", tg.gen, err, out)
		}
		for _, f := range [][2]string{{asm, tg.asm}, {stubs, tg.stubs}} {
			got, err := os.ReadFile(f[0])
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join("..", f[1]))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dropHeader(got), dropHeader(want)) {
				t.Errorf("%s is stale: run go generate in its package", f[1])
			}
		}
	}
}

func dropHeader(b []byte) []byte {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}

// TestAVX2UsesNoEVEX checks that no AVX2 function touches a register that
// needs AVX-512 (X/Y16..31, Z, K): the allocator would use them silently if
// a kernel needed more than 16 vector registers, and the code would fault on
// AVX2-only CPUs.
func TestAVX2UsesNoEVEX(t *testing.T) {
	evex := regexp.MustCompile(`\b([XY](1[6-9]|2[0-9]|3[01])|Z[0-9]+|K[1-7])\b`)
	for _, tg := range targets {
		src, err := os.ReadFile(filepath.Join("..", tg.asm))
		if err != nil {
			t.Fatal(err)
		}
		fn := ""
		for i, line := range strings.Split(string(src), "\n") {
			if strings.HasPrefix(line, "TEXT ") {
				fn = line
			}
			if strings.Contains(fn, "AVX2(SB)") && evex.MatchString(line) {
				t.Errorf("%s:%d: AVX2 function uses an AVX-512 register: %s", tg.asm, i+1, line)
			}
		}
	}
}

// TestNEONRegisters checks that no arm64 function touches a register Go
// reserves (R18 platform, R26 closure context, R27 the assembler's
// temporary, R28 g, R29 frame pointer, R30 link register) or R16/R17, which
// the linker may use in veneers.
func TestNEONRegisters(t *testing.T) {
	reserved := regexp.MustCompile(`\bR(1[678]|2[6-9]|30)\b|\bRSP\b`)
	for _, tg := range targets {
		if !strings.HasSuffix(tg.asm, "_arm64.s") {
			continue
		}
		src, err := os.ReadFile(filepath.Join("..", tg.asm))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			if code, _, _ := strings.Cut(line, "//"); reserved.MatchString(code) {
				t.Errorf("%s:%d: uses a reserved register: %s", tg.asm, i+1, line)
			}
		}
	}
}
