package specpolicy

import "math"

// Cost is the model of one pass's wall time: the bytes it reads over the
// disk's rate, plus its compute. The planner gives the bytes' shape (the
// trunk streamed once per pass, the routed experts of the union of the
// rows' choices, less the cache's hits); Calibration fits the rates to the
// passes run.
type Cost struct {
	// TrunkBytes is what a pass reads of the trunk, whatever its rows.
	TrunkBytes float64
	// ExpertBytes is what one distinct routed expert per MoE layer costs a
	// pass: an expert's bytes × the MoE layers × the chance it misses the
	// cache.
	ExpertBytes float64
	// Experts and TopK shape the union: R rows with routing spread over
	// Experts choose Experts·(1−(1−TopK/Experts)^R) distinct experts per
	// layer.
	Experts, TopK int
	// BytesPerSecond is the disk's rate as the passes see it (0: nothing
	// is read).
	BytesPerSecond float64
	// CPUFixed and CPURow: a pass computes for CPUFixed + CPURow × rows
	// seconds that reads do not hide.
	CPUFixed, CPURow float64
	// SpecSeq is the time a sequence that speculates adds to a pass:
	// copying its recurrent state before, and rolling it back after a
	// rejected draft.
	SpecSeq float64
}

// Union returns the expected distinct experts per MoE layer of rows rows.
func (c *Cost) Union(rows int) float64 {
	if c.Experts <= 0 || rows <= 0 {
		return 0
	}
	e := float64(c.Experts)
	return e * (1 - math.Pow(1-float64(min(c.TopK, c.Experts))/e, float64(rows)))
}

// Bytes returns the expected bytes a pass of rows rows reads.
func (c *Cost) Bytes(rows int) float64 {
	return c.TrunkBytes + c.ExpertBytes*c.Union(rows)
}

// Seconds returns the expected wall time of a pass of rows rows of which
// specSeqs sequences speculate.
func (c *Cost) Seconds(rows, specSeqs int) float64 {
	t := c.CPUFixed + c.CPURow*float64(rows) + c.SpecSeq*float64(specSeqs)
	if c.BytesPerSecond > 0 {
		t += c.Bytes(rows) / c.BytesPerSecond
	}
	return t
}
