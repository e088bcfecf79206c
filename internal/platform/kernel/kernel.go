// Package kernel is the registry of kernel implementations shared by the
// tensor and quant packages, in the manner of the standard library's
// crypto/internal/impl: each package registers its implementations (generic
// Go first, faster ones after), the registry selects one once at start-up,
// and tests can switch between them.
//
// Selection, strongest first: K3_KERNELS (see internal/platform/cpu), then the
// fastest implementation the CPU supports. Every non-generic implementation
// must pass a self-check against the generic reference before it can be
// selected; one that fails is marked unavailable with the reason, so an
// assembly kernel that was never run on this CPU model cannot silently
// produce wrong numbers.
package kernel

import (
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/k3go/k3/internal/platform/cpu"
)

// Status describes one compiled-in implementation.
type Status struct {
	Name      string
	Available bool
	// Reason says why the implementation is unavailable (CPU features,
	// build tags, a failed self-check), or why the selection differs from
	// K3_KERNELS; empty otherwise.
	Reason string
}

// StatusLike is a public package's copy of Status (tensor.ImplStatus),
// declared there so that its documentation names no internal package.
type StatusLike interface {
	~struct {
		Name      string
		Available bool
		Reason    string
	}
}

// StatusesAs converts statuses to a public package's copy of Status.
func StatusesAs[S StatusLike](all []Status) []S {
	out := make([]S, len(all))
	for i, s := range all {
		out[i] = S(s)
	}
	return out
}

// Registry holds the implementations of one package's kernels.
type Registry[T any] struct {
	pkg     string
	entries []*entry[T]
	cur     atomic.Pointer[entry[T]]
	note    string
	check   func(T) error
	once    sync.Once
}

type entry[T any] struct {
	Status
	impl T
}

// New returns a registry for package pkg (used in error messages) whose
// first implementation is the generic one.
func New[T any](pkg string, generic T) *Registry[T] {
	r := &Registry[T]{pkg: pkg}
	e := &entry[T]{Status: Status{Name: cpu.Generic, Available: true}, impl: generic}
	r.entries = append(r.entries, e)
	r.cur.Store(e)
	return r
}

// Add registers an implementation named after its kernel set in
// internal/platform/cpu (cpu.AVX2, cpu.AVX512, cpu.NEON). Implementations
// must be added in increasing order of speed.
func (r *Registry[T]) Add(name string, impl T) {
	ok, reason := cpu.Supported(name)
	r.entries = append(r.entries, &entry[T]{Status: Status{Name: name, Available: ok, Reason: reason}, impl: impl})
}

// Init records the self-check. On first use of the registry (any method
// below), check runs on every available non-generic implementation, the
// ones that fail are marked unavailable, and the implementation is selected:
// K3_KERNELS if it names an available one, else the last available. check
// must compare the implementation with the generic one on small
// deterministic inputs; a panic or memory fault inside check counts as a
// failure. Deferring the work to first use keeps package initialisation
// cheap for programs that never multiply.
func (r *Registry[T]) Init(check func(T) error) { r.check = check }

// Setup is the start-up glue of a kernel package: it adds impls (in
// increasing order of speed) under their names, sets each one's own
// availability flag from the CPU, and installs check as the self-check,
// which clears the flag of an implementation that fails it. name and
// setAvailable reach the package's implementation type.
func (r *Registry[T]) Setup(impls []T, name func(T) string, setAvailable func(T, bool), check func(T) error) {
	for _, impl := range impls {
		r.Add(name(impl), impl)
		ok, _ := cpu.Supported(name(impl))
		setAvailable(impl, ok)
	}
	r.Init(func(impl T) error {
		err := check(impl)
		setAvailable(impl, err == nil)
		return err
	})
}

func (r *Registry[T]) ready() { r.once.Do(r.selectImpl) }

func (r *Registry[T]) selectImpl() {
	for _, e := range r.entries[1:] {
		if !e.Available || r.check == nil {
			continue
		}
		if err := safeCheck(r.check, e.impl); err != nil {
			e.Available = false
			e.Reason = fmt.Sprintf("self-check against generic failed: %v", err)
		}
	}
	sel := r.entries[0]
	for _, e := range r.entries {
		if e.Available {
			sel = e
		}
	}
	if o := cpu.Override(); o != "" {
		found := false
		for _, e := range r.entries {
			if e.Name == o {
				found = true
				if e.Available {
					sel = e
				} else {
					r.note = fmt.Sprintf("%s=%s ignored: %s", cpu.EnvVar, o, e.Reason)
				}
			}
		}
		if !found {
			r.note = fmt.Sprintf("%s=%s ignored: unknown kernel set", cpu.EnvVar, o)
		}
	}
	r.cur.Store(sel)
}

func safeCheck[T any](check func(T) error, impl T) (err error) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return check(impl)
}

// Current returns the selected implementation.
func (r *Registry[T]) Current() T {
	r.ready()
	return r.cur.Load().impl
}

// CurrentName returns the name of the selected implementation.
func (r *Registry[T]) CurrentName() string {
	r.ready()
	return r.cur.Load().Name
}

// Names lists the available implementations, slowest first.
func (r *Registry[T]) Names() []string {
	r.ready()
	var s []string
	for _, e := range r.entries {
		if e.Available {
			s = append(s, e.Name)
		}
	}
	return s
}

// Lookup returns the named implementation if it is available.
func (r *Registry[T]) Lookup(name string) (T, bool) {
	r.ready()
	for _, e := range r.entries {
		if e.Name == name && e.Available {
			return e.impl, true
		}
	}
	var zero T
	return zero, false
}

// All returns the status of every compiled-in implementation. The selected
// one's Reason carries a note when a K3_KERNELS override was ignored.
func (r *Registry[T]) All() []Status {
	r.ready()
	s := make([]Status, len(r.entries))
	cur := r.cur.Load()
	for i, e := range r.entries {
		s[i] = e.Status
		if e == cur && r.note != "" {
			s[i].Reason = r.note
		}
	}
	return s
}

// Set selects the named implementation for the whole process and returns a
// function that restores the previous selection.
func (r *Registry[T]) Set(name string) (restore func(), err error) {
	r.ready()
	for _, e := range r.entries {
		if e.Name != name {
			continue
		}
		if !e.Available {
			return nil, fmt.Errorf("%s: kernel %q not available: %s", r.pkg, name, e.Reason)
		}
		prev := r.cur.Swap(e)
		return func() { r.cur.Store(prev) }, nil
	}
	return nil, fmt.Errorf("%s: unknown kernel %q", r.pkg, name)
}
