package specpolicy

// Calibration fits a Cost's rates to the passes the engine runs: the
// disk's rate from the bytes read over the time reads were in flight, the
// cache's miss rate from the experts read against the union the rows
// needed, and the compute not hidden by reads (a pass's time less its
// reads) as a line in the rows, fitted by least squares over the recent
// passes of decoding width. It is used from one goroutine (the batcher).
type Calibration struct {
	shape      Cost    // the planner's: trunk bytes, experts, top-k
	expertFull float64 // an expert's bytes × MoE layers: the cost of a distinct expert that misses
	streams    bool    // the plan reads anything per pass

	bw, bwW     float64 // disk rate, and the weight of its estimate
	miss, missW float64
	spec, specW float64

	// Weighted sums of the compute samples (x rows, y seconds), decayed
	// by forget per observation.
	w, wx, wxx, wy, wxy float64
}

// Rates the calibration assumes until the passes tell otherwise, and how
// fast it forgets.
const (
	// rowPrior: a second row costs a quarter of a one-row pass's compute
	// (measured with everything resident on the development machine, §7
	// of docs/PERFORMANCE.md: 4 rows 1.75×, 8 rows 2.6× one row). It only
	// stands in for the slope until passes of two widths have been seen.
	rowPrior = 0.25
	// slopeWeight is the prior slope's weight, in squared rows of data.
	slopeWeight = 2
	// forget discounts older passes: the last ~20 dominate.
	forget = 0.95
	// maxFitRows: wider passes (prompts) run other kernels at other
	// rates; the fit keeps to decoding widths.
	maxFitRows = 64
)

// NewCalibration starts from the planner's shape of a pass: trunkBytes
// streamed per pass, expertFull bytes per distinct expert missed (an
// expert's bytes times the MoE layers), the experts per layer and top-k,
// and hit, the cache's expected hit rate (its slots over the experts).
func NewCalibration(trunkBytes, expertFull float64, experts, topK int, hit float64) *Calibration {
	k := &Calibration{shape: Cost{TrunkBytes: trunkBytes, Experts: experts, TopK: topK}, expertFull: expertFull}
	k.streams = trunkBytes > 0 || hit < 1
	k.miss, k.missW = max(0, 1-hit), 1
	return k
}

// Observation is one pass as the engine measured it.
type Observation struct {
	Rows    int
	Seconds float64 // wall time
	// Bytes read, IOSeconds the time reads were in flight during it;
	// ExpertBytes the routed experts' part of Bytes, Union the mean
	// distinct experts per MoE layer the rows needed.
	Bytes, IOSeconds   float64
	ExpertBytes, Union float64
}

func ewma(v, w, x, alpha float64) (float64, float64) {
	if w == 0 {
		return x, 1
	}
	return v + alpha*(x-v), w + 1
}

// Observe adds a pass.
func (k *Calibration) Observe(o Observation) {
	if o.Rows <= 0 || o.Seconds <= 0 {
		return
	}
	if o.Bytes > 0 && o.IOSeconds > 0.01 {
		k.bw, k.bwW = ewma(k.bw, k.bwW, o.Bytes/o.IOSeconds, 0.2)
	}
	if o.Union > 0 && k.expertFull > 0 {
		k.miss, k.missW = ewma(k.miss, k.missW, min(1, o.ExpertBytes/(o.Union*k.expertFull)), 0.2)
	}
	if o.Rows > maxFitRows {
		return
	}
	y := o.Seconds
	if k.bw > 0 {
		y = max(0, y-o.Bytes/k.bw)
	} else if o.Bytes > 0 {
		return // reads whose rate is not known yet
	}
	x := float64(o.Rows)
	k.w, k.wx, k.wxx, k.wy, k.wxy = forget*k.w+1, forget*k.wx+x, forget*k.wxx+x*x, forget*k.wy+y, forget*k.wxy+x*y
}

// ObserveSpec adds the time one speculating sequence spent outside the
// pass: its state's copy and, after a rejection, its rollback.
func (k *Calibration) ObserveSpec(seconds float64) {
	k.spec, k.specW = ewma(k.spec, k.specW, seconds, 0.1)
}

// Ready reports whether the passes seen so far determine a cost: some
// compute observed, and the disk's rate if the plan reads anything.
func (k *Calibration) Ready() bool {
	return k.w > 0 && (!k.streams || k.bw > 0)
}

// Cost returns the pass model fitted so far.
func (k *Calibration) Cost() Cost {
	c := k.shape
	c.BytesPerSecond = k.bw
	c.ExpertBytes = k.expertFull * k.miss
	c.SpecSeq = k.spec
	if k.w == 0 {
		return c
	}
	mx, my := k.wx/k.w, k.wy/k.w
	sxx, sxy := k.wxx-k.w*mx*mx, k.wxy-k.w*mx*my
	// The prior slope: rowPrior of a one-row pass's compute, that pass
	// being what the fit's mean says with that slope.
	b0 := rowPrior * my / (1 + rowPrior*(mx-1))
	b := (sxy + slopeWeight*b0) / (max(sxx, 0) + slopeWeight)
	b = max(b, 0)
	a := max(my-b*mx, 0)
	c.CPUFixed, c.CPURow = a, b
	return c
}
