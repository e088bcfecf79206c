package probe

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
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
				for b.Loop() {
					Parallel(th, func(i int) { Read(impl, buf[i*share:(i+1)*share]) })
				}
				b.ReportMetric(float64(share*th)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	})
	b.Run("FMAPeak", func(b *testing.B) {
		for _, th := range Threads() {
			b.Run(fmt.Sprintf("threads%d", th), func(b *testing.B) {
				const iters = 1 << 22
				var flops float64
				for b.Loop() {
					var mu sync.Mutex
					Parallel(th, func(int) {
						f := FMA(impl, iters)
						mu.Lock()
						flops += f
						mu.Unlock()
					})
				}
				b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	})
}
