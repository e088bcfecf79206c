package quant

import (
	"fmt"
	"sync/atomic"
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
}

var (
	impls   = []*Impl{&genericImpl}
	current atomic.Pointer[Impl]
)

var genericImpl = Impl{Name: "generic", Mat: matGeneric, Available: true}

func init() { current.Store(best()) }

func register(i *Impl) {
	impls = append(impls, i)
	current.Store(best())
}

func best() *Impl {
	for k := len(impls) - 1; k >= 0; k-- {
		if impls[k].Available {
			return impls[k]
		}
	}
	return &genericImpl
}

func active() *Impl { return current.Load() }

// Implementations lists the kernel implementations this CPU can run.
func Implementations() []string {
	var s []string
	for _, i := range impls {
		if i.Available {
			s = append(s, i.Name)
		}
	}
	return s
}

// Implementation returns the name of the selected implementation.
func Implementation() string { return active().Name }

// SetImplementation selects an implementation by name for the whole process
// and returns a function that restores the previous one (for tests and the
// kernel override; never while a forward pass runs).
func SetImplementation(name string) (restore func(), err error) {
	for _, i := range impls {
		if i.Name == name {
			if !i.Available {
				return nil, fmt.Errorf("quant: kernel %q not supported by this CPU", name)
			}
			prev := current.Swap(i)
			return func() { current.Store(prev) }, nil
		}
	}
	return nil, fmt.Errorf("quant: unknown kernel %q", name)
}
