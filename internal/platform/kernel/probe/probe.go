// Package probe measures the machine's roofline for the kernel benchmarks:
// the peak f32 FMA rate of one core and the memory read bandwidth, with the
// vector width of the selected kernels.
package probe

import (
	"runtime"
	"sync"
	"time"
)

// FMA runs iters iterations of independent vector FMAs (12 with "avx2" or
// "avx512", 16 with "neon") with the named implementation's vectors
// (anything else runs a scalar Go loop) and returns the flops executed.
func FMA(impl string, iters int) (flops float64) { return fma(impl, iters) }

// Read streams buf through vector loads with the named implementation's
// vectors.
func Read(impl string, buf []byte) { read(impl, buf) }

// Parallel runs f(i) for i < threads on separate goroutines, each locked to
// an OS thread, and returns the wall time from a common start.
func Parallel(threads int, f func(i int)) time.Duration {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(threads)
	done.Add(threads)
	for i := 0; i < threads; i++ {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ready.Done()
			<-start
			f(i)
			done.Done()
		}()
	}
	ready.Wait()
	t0 := time.Now()
	close(start)
	done.Wait()
	return time.Since(t0)
}
