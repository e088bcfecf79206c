package probe

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

// BandwidthBytes is the size of the buffer the bandwidth probe reads: far
// larger than any cache, like the weights the kernels stream.
const BandwidthBytes = 2 << 30

var (
	bwOnce sync.Once
	bwBuf  []byte
)

func bandwidthBuffer() []byte {
	bwOnce.Do(func() {
		bwBuf = make([]byte, BandwidthBytes)
		for i := 0; i < len(bwBuf); i += 4096 {
			bwBuf[i] = byte(i >> 12)
		}
	})
	return bwBuf
}

// Threads returns the thread counts benchmarks report: 1 and GOMAXPROCS.
func Threads() []int {
	if n := runtime.GOMAXPROCS(0); n > 1 {
		return []int{1, n}
	}
	return []int{1}
}

// Benchmarks runs the roofline probes as sub-benchmarks of b:
// MemBandwidth/threadsN (GB/s reading a 2 GiB buffer, each thread its own
// contiguous share) and FMAPeak/threadsN (GFLOP/s of independent vector
// FMAs with impl's vector width).
func Benchmarks(b *testing.B, impl string) {
	b.Run("MemBandwidth", func(b *testing.B) {
		buf := bandwidthBuffer()
		for _, th := range Threads() {
			b.Run(fmt.Sprintf("threads%d", th), func(b *testing.B) {
				share := len(buf) / th
				read := func() { Parallel(th, func(i int) { Read(impl, buf[i*share:(i+1)*share]) }) }
				WarmUp(500*time.Millisecond, read)
				best := Best{}
				for b.Loop() {
					best.Start()
					read()
					best.Stop()
				}
				best.Report(b, 0, float64(share*th))
			})
		}
	})
	b.Run("FMAPeak", func(b *testing.B) {
		for _, th := range Threads() {
			b.Run(fmt.Sprintf("threads%d", th), func(b *testing.B) {
				const iters = 1 << 22
				var flops float64
				best := Best{}
				for b.Loop() {
					var mu sync.Mutex
					best.Start()
					Parallel(th, func(int) {
						f := FMA(impl, iters)
						mu.Lock()
						flops = f * float64(th)
						mu.Unlock()
					})
					best.Stop()
				}
				best.Report(b, flops, 0)
			})
		}
	})
}

// WarmUp runs f until it has run at least twice and for at least d, before
// a benchmark's timed loop: the first passes over a freshly allocated
// matrix are markedly slower on the development VM (guest memory being
// mapped in), which is not what the kernels cost in steady state.
func WarmUp(d time.Duration, f func()) {
	t0 := time.Now()
	for i := 0; i < 2 || time.Since(t0) < d; i++ {
		f()
	}
}

// Best times the iterations of a benchmark loop one by one and reports,
// next to the mean rates (GFLOP/s, GB/s), the rates of the fastest
// iteration (best-GFLOP/s, best-GB/s), its time (best-ms), and the CPU time
// the process spent per iteration, all threads together (cpu-ms/op, where
// the OS reports it): on a shared machine the mean includes time stolen by
// other processes, while the best iteration and the CPU time show what the
// kernel itself costs.
type Best struct {
	t0       time.Time
	c0       time.Duration
	total    time.Duration
	best     time.Duration
	cpu      time.Duration
	n        int
	cpuKnown bool
}

// Start marks the start of an iteration.
func (b *Best) Start() {
	b.c0, b.cpuKnown = processCPU()
	b.t0 = time.Now()
}

// Stop marks its end.
func (b *Best) Stop() {
	d := time.Since(b.t0)
	if c, ok := processCPU(); ok && b.cpuKnown {
		b.cpu += c - b.c0
	}
	b.total += d
	if b.n == 0 || d < b.best {
		b.best = d
	}
	b.n++
}

// Report reports the metrics for flops and bytes per iteration (0 skips).
func (b *Best) Report(tb *testing.B, flops, bytes float64) {
	if b.n == 0 {
		return
	}
	mean := b.total.Seconds() / float64(b.n)
	best := b.best.Seconds()
	if flops > 0 {
		tb.ReportMetric(flops/mean/1e9, "GFLOP/s")
		tb.ReportMetric(flops/best/1e9, "best-GFLOP/s")
	}
	if bytes > 0 {
		tb.ReportMetric(bytes/mean/1e9, "GB/s")
		tb.ReportMetric(bytes/best/1e9, "best-GB/s")
	}
	tb.ReportMetric(best*1e3, "best-ms")
	if b.cpuKnown {
		tb.ReportMetric(b.cpu.Seconds()*1e3/float64(b.n), "cpu-ms/op")
	}
}
