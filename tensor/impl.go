package tensor

import (
	"fmt"
	"sync/atomic"
)

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
}

var (
	impls   = []*Impl{&genericImpl}
	current atomic.Pointer[Impl]
)

var genericImpl = Impl{Name: "generic", MatBF16: matBF16Generic, MatF32: matF32Generic, Available: true}

func init() { current.Store(best()) }

// register adds an implementation; called from init functions of
// architecture-specific files.
func register(i *Impl) {
	impls = append(impls, i)
	current.Store(best())
}

// best returns the last registered available implementation (later
// registrations are faster).
func best() *Impl {
	for k := len(impls) - 1; k >= 0; k-- {
		if impls[k].Available {
			return impls[k]
		}
	}
	return &genericImpl
}

func active() *Impl { return current.Load() }

// Implementations lists the names of the kernel implementations compiled in,
// with whether this CPU can run each.
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

// SetImplementation selects a kernel implementation by name for the whole
// process and returns a function that restores the previous one. It exists
// for tests and for k3's kernel override; kernels must not be switched while
// a forward pass runs.
func SetImplementation(name string) (restore func(), err error) {
	for _, i := range impls {
		if i.Name == name {
			if !i.Available {
				return nil, fmt.Errorf("tensor: kernel %q not supported by this CPU", name)
			}
			prev := current.Swap(i)
			return func() { current.Store(prev) }, nil
		}
	}
	return nil, fmt.Errorf("tensor: unknown kernel %q", name)
}
