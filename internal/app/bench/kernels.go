package bench

import (
	"math/rand/v2"
	"sort"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/platform/par"
	"github.com/k3go/k3/internal/testkit/benchdata"
	"github.com/k3go/k3/quant"
	"github.com/k3go/k3/tensor"
)

// kernelRates measures the BF16 and MXFP4 mat-vec rates at this model's
// shapes with the given threads, in GFLOP/s; the BF16 matrix has fewer
// rows where its bytes would exceed room.
func kernelRates(c k3.Config, threads int, room int64) (bf16, mx float64) {
	pool := par.New(threads)
	defer pool.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	rows, cols := c.KDAHeads*c.KDAHeadDim, c.Hidden
	if fit := room / int64(2*cols); int64(rows) > fit {
		rows = max(int(fit)&^15, 16)
	}
	// Weights drawn like a trained model's: arbitrary bytes hold subnormals,
	// which cost Intel cores a microcode assist and understate the rate.
	w := tensor.Mat{DType: tensor.BF16, Rows: rows, Cols: cols, Data: benchdata.BF16Weights(rng, rows*cols)}
	x := benchdata.Activations(rng, cols)
	y := make([]float32, rows)
	bf16 = rate(func() { tensor.MatVec(pool, y, w, x) }, 2*float64(rows*cols))

	I, Lt := c.MoEIntermediate, c.LatentDim
	packed, scales := benchdata.MXFP4(rng, I, Lt)
	mxm := quant.Matrix{Rows: I, Cols: Lt, Packed: packed, Scales: scales}
	xl := benchdata.Activations(rng, Lt)
	yl := make([]float32, I)
	mx = rate(func() { quant.MatVec(pool, yl, mxm, xl) }, 2*float64(I*Lt))
	return bf16, mx
}

// rate runs f repeatedly for about 300 ms and returns the best GFLOP/s.
func rate(f func(), flop float64) float64 {
	var ts []time.Duration
	end := time.Now().Add(300 * time.Millisecond)
	for len(ts) < 3 || time.Now().Before(end) {
		t := time.Now()
		f()
		ts = append(ts, time.Since(t))
		if len(ts) > 10000 {
			break
		}
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	return flop / ts[len(ts)/4].Seconds() / 1e9
}
