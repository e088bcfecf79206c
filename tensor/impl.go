package tensor

import "github.com/k3go/k3/internal/platform/kernel"

// MatKernel computes rows [0, rows) of a row-major weight block w (cols
// columns per row) for n tokens: dst[t*dstStride+r] = Σ_c w[r][c]·x[t*cols+c].
// Implementations trust their arguments; the exported wrappers check them.
type MatKernel func(dst []float32, dstStride int, w []byte, rows, cols int, x []float32, n int)

// Impl is one implementation of the dense kernels (generic Go, AVX2, ...).
type Impl struct {
	Name    string
	MatBF16 MatKernel
	MatF32  MatKernel
	// Available reports whether the CPU can run this implementation.
	Available bool

	// accel, when not nil, runs whole MatMul calls (the SIMD paths need
	// activations packed once per call).
	accel accel
	// vec holds the vector helpers (nil: generic).
	vec *vecOps
}

// accel is the hook of an assembly implementation.
type accel interface {
	// grain returns the rows per parallel chunk.
	grain(rowBytes, n int) int
	// packX returns x prepared for an n-token call (nil if not needed) and
	// the pooled buffer holding it, to be given back with releaseX.
	packX(x []float32, cols, n int) (px []float32, buf *[]float32)
	releaseX(buf *[]float32)
	// mat computes rows [0, rows) of w for n tokens (MatKernel contract),
	// with px from packX.
	mat(dst []float32, dstStride int, w []byte, bf16 bool, rows, cols int, x, px []float32, n int)
}

// ImplStatus describes one compiled-in implementation: whether it can run
// here and, if not, why (missing CPU features, the purego tag, or a failed
// start-up self-check against the generic kernels).
type ImplStatus struct {
	Name      string
	Available bool
	// Reason says why the implementation is unavailable, or why the
	// selection differs from K3_KERNELS; empty otherwise.
	Reason string
}

var genericImpl = Impl{Name: "generic", MatBF16: matBF16Generic, MatF32: matF32Generic, Available: true}

var reg = kernel.New("tensor", &genericImpl)

func init() {
	reg.Setup(archImpls, func(i *Impl) string { return i.Name }, func(i *Impl, ok bool) { i.Available = ok }, selfCheck)
}

func active() *Impl { return reg.Current() }

// Implementations lists the names of the kernel implementations this CPU
// can run, slowest first ("generic", then "avx2", "avx512" on amd64 or
// "neon" on arm64).
func Implementations() []string { return reg.Names() }

// ImplementationStatus reports every compiled-in implementation, including
// those this CPU cannot run, with the reason.
func ImplementationStatus() []ImplStatus { return kernel.StatusesAs[ImplStatus](reg.All()) }

// Implementation returns the name of the selected implementation.
//
// The selection is made once at start-up: the K3_KERNELS environment
// variable (generic, avx2, avx512, neon) if it names an available
// implementation, else the fastest one that passed its self-check.
// GODEBUG=cpu.avx512f=off and similar settings hide amd64 CPU features; the
// purego build tag leaves only generic.
func Implementation() string { return reg.CurrentName() }

// SetImplementation selects a kernel implementation by name for the whole
// process and returns a function that restores the previous one. It exists
// for tests and for k3's kernel override; kernels must not be switched while
// a forward pass runs.
func SetImplementation(name string) (restore func(), err error) { return reg.Set(name) }
