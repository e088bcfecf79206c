package quant

import (
	"github.com/k3go/k3/internal/platform/kernel"
	"github.com/k3go/k3/tensor"
)

// MatKernel computes rows [0, rows) of an MXFP4 block (cols columns per row)
// for n tokens: dst[t*dstStride+r] = Σ_c W[r][c]·x[t*cols+c]. Implementations
// trust their arguments; the exported wrappers check them.
type MatKernel func(dst []float32, dstStride int, packed, scales []byte, rows, cols int, x []float32, n int)

// Impl is one implementation of the MXFP4 kernels.
type Impl struct {
	Name      string
	Mat       MatKernel
	Available bool

	// accel, when not nil, runs whole MatMul calls (the SIMD paths need
	// activations permuted and packed once per call).
	accel accel
}

// accel is the hook of an assembly implementation.
type accel interface {
	grain(n int) int
	packX(x []float32, cols, n int) (px []float32, buf *[]float32) // buf: give back with releaseX
	releaseX(buf *[]float32)
	mat(dst []float32, dstStride int, packed, scales []byte, rows, cols int, x, px []float32, n int)
}

// ImplStatus describes one compiled-in implementation: whether it can run
// here and, if not, why (missing CPU features, the purego tag, or a failed
// start-up self-check against the generic kernel).
type ImplStatus = tensor.ImplStatus

var genericImpl = Impl{Name: "generic", Mat: matGeneric, Available: true}

var reg = kernel.New("quant", &genericImpl)

func init() {
	reg.Setup(archImpls, func(i *Impl) string { return i.Name }, func(i *Impl, ok bool) { i.Available = ok }, selfCheck)
}

func active() *Impl { return reg.Current() }

// Implementations lists the kernel implementations this CPU can run,
// slowest first ("generic", then "avx2", "avx512" on amd64 or "neon" on
// arm64).
func Implementations() []string { return reg.Names() }

// ImplementationStatus reports every compiled-in implementation, including
// those this CPU cannot run, with the reason.
func ImplementationStatus() []ImplStatus { return kernel.StatusesAs[ImplStatus](reg.All()) }

// Implementation returns the name of the selected implementation (chosen
// once at start-up; see tensor.Implementation for the rules).
func Implementation() string { return reg.CurrentName() }

// SetImplementation selects an implementation by name for the whole process
// and returns a function that restores the previous one (for tests and the
// kernel override; never while a forward pass runs).
func SetImplementation(name string) (restore func(), err error) { return reg.Set(name) }
