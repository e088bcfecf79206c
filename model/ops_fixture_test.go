package model

// Per-operation conformance tests against the PyTorch fixtures in
// ../shared/fixtures/ops (model spec §10.1–10.2). Every output element is
// held to the MANIFEST tolerance |got − want| ≤ abs + rel·|want|, computed
// in float64; each test logs its largest error as a fraction of that bound.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"

	"github.com/k3go/k3/expert"
	"testing"

	"github.com/k3go/k3/internal/platform/par"
	"github.com/k3go/k3/internal/testkit/fixtures"
	"github.com/k3go/k3/tensor"
)

// opTolerance is MANIFEST.json["tolerance"].
type opTolerance struct {
	Abs float64 `json:"fp32_abs"`
	Rel float64 `json:"fp32_rel"`
}

type opManifest struct {
	Config    json.RawMessage `json:"config"`
	Tolerance *opTolerance    `json:"tolerance"`
}

// loadManifest reads ops/MANIFEST.json. The ops folder may be absent (the
// test skips, or fails under K3_FIXTURES); when it is there, a missing or
// malformed manifest fails the test.
func loadManifest(t *testing.T) *opManifest {
	t.Helper()
	dir := fixtures.Path(t, "ops")
	raw, err := os.ReadFile(filepath.Join(dir, "MANIFEST.json"))
	if err != nil {
		t.Fatalf("ops fixtures without a manifest: %v", err)
	}
	var m opManifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("MANIFEST.json: %v", err)
	}
	if m.Tolerance == nil || !(m.Tolerance.Abs > 0) || !(m.Tolerance.Rel > 0) {
		t.Fatalf("MANIFEST.json: no usable tolerance (%+v)", m.Tolerance)
	}
	if len(m.Config) == 0 {
		t.Fatal("MANIFEST.json: no config")
	}
	return &m
}

// opsConfig parses MANIFEST.json["config"], the tiny flat config (I = 48).
func opsConfig(t *testing.T, m *opManifest) *Config {
	t.Helper()
	c, err := ParseConfig(m.Config)
	if err != nil {
		t.Fatalf("MANIFEST config: %v", err)
	}
	return c
}

// opFixture is one ops/*.json file.
type opFixture struct {
	name string
	tol  opTolerance
	raw  map[string]json.RawMessage
}

type fxTensor struct {
	Shape []int     `json:"shape"`
	Data  []float64 `json:"data"`
}

func loadOp(t *testing.T, name string) (*opFixture, *opManifest) {
	t.Helper()
	m := loadManifest(t)
	p := fixtures.Path(t, "ops/"+name)
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	f := &opFixture{name: name, tol: *m.Tolerance}
	if err := json.Unmarshal(raw, &f.raw); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return f, m
}

// tensor64 returns a tensor's data as float64, checking its shape when
// shape is given.
func (f *opFixture) tensor64(t *testing.T, key string, shape ...int) []float64 {
	t.Helper()
	r, ok := f.raw[key]
	if !ok {
		t.Fatalf("%s: no key %q", f.name, key)
	}
	var x fxTensor
	if err := json.Unmarshal(r, &x); err != nil {
		t.Fatalf("%s[%q]: %v", f.name, key, err)
	}
	n := 1
	for _, d := range x.Shape {
		n *= d
	}
	if n != len(x.Data) {
		t.Fatalf("%s[%q]: shape %v but %d values", f.name, key, x.Shape, len(x.Data))
	}
	if shape != nil && fmt.Sprint(shape) != fmt.Sprint(x.Shape) {
		t.Fatalf("%s[%q]: shape %v, want %v", f.name, key, x.Shape, shape)
	}
	return x.Data
}

// tensor returns a tensor's data parsed as float64 and converted to f32.
func (f *opFixture) tensor(t *testing.T, key string, shape ...int) []float32 {
	t.Helper()
	d := f.tensor64(t, key, shape...)
	out := make([]float32, len(d))
	for i, v := range d {
		out[i] = float32(v)
	}
	return out
}

func (f *opFixture) scalar(t *testing.T, key string) float64 {
	t.Helper()
	r, ok := f.raw[key]
	if !ok {
		t.Fatalf("%s: no key %q", f.name, key)
	}
	var v float64
	if err := json.Unmarshal(r, &v); err != nil {
		t.Fatalf("%s[%q]: %v", f.name, key, err)
	}
	return v
}

func (f *opFixture) int(t *testing.T, key string) int {
	t.Helper()
	v := f.scalar(t, key)
	if v != math.Trunc(v) {
		t.Fatalf("%s[%q] = %v, want an integer", f.name, key, v)
	}
	return int(v)
}

// closeness measures got against want under |d| ≤ abs + rel·|want|. It
// returns the largest |d|/bound, its index, and whether every element is
// within its bound (NaN never is).
func closeness(got []float32, want []float64, abs, rel float64) (worst float64, at int, ok bool) {
	ok = len(got) == len(want)
	at = -1
	for i := range min(len(got), len(want)) {
		d := math.Abs(float64(got[i]) - want[i])
		frac := d / (abs + rel*math.Abs(want[i]))
		if math.IsNaN(frac) {
			frac = math.Inf(1)
		}
		if frac > worst || at < 0 {
			worst, at = frac, i
		}
	}
	return worst, at, ok && worst <= 1
}

// expect asserts got against want under the MANIFEST tolerance and logs
// the largest error as a fraction of the tolerance.
func (f *opFixture) expect(t *testing.T, what string, got []float32, want []float64) float64 {
	t.Helper()
	return expectTol(t, f.name+" "+what, got, want, f.tol.Abs, f.tol.Rel)
}

func expectTol(t *testing.T, what string, got []float32, want []float64, abs, rel float64) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d values, want %d", what, len(got), len(want))
		return math.Inf(1)
	}
	worst, at, ok := closeness(got, want, abs, rel)
	t.Logf("%s: max error %.3f of tolerance (element %d)", what, worst, at)
	if !ok {
		bad := 0
		for i := range got {
			if d := math.Abs(float64(got[i]) - want[i]); !(d <= abs+rel*math.Abs(want[i])) {
				if bad < 5 {
					t.Errorf("%s[%d] = %.9g, want %.9g (|Δ| = %.3g > %.3g)", what, i, got[i], want[i], d, abs+rel*math.Abs(want[i]))
				}
				bad++
			}
		}
		t.Errorf("%s: %d of %d elements outside tolerance (worst %.3g× at %d)", what, bad, len(got), worst, at)
	}
	return worst
}

// f32Mat stores w (rows×cols, row-major) as an F32 matrix.
func f32Mat(w []float32, rows, cols int) tensor.Mat {
	if len(w) != rows*cols {
		panic(fmt.Sprintf("f32Mat: %d values for %dx%d", len(w), rows, cols))
	}
	b := make([]byte, 4*len(w))
	for i, v := range w {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return tensor.Mat{DType: tensor.F32, Rows: rows, Cols: cols, Data: b}
}

// linear reads a fixture matrix as an F32 Linear of the given shape.
func (f *opFixture) linear(t *testing.T, key string, rows, cols int) Linear {
	t.Helper()
	return Linear{Dense: f32Mat(f.tensor(t, key, rows, cols), rows, cols)}
}

// fixtureExperts is an expert.Source over dense f32 expert matrices of one
// layer. It checks the protocol: every Acquire is for a prefetched expert of
// that layer and is released.
type fixtureExperts struct {
	layer int
	w     [][3]Linear

	mu         sync.Mutex
	prefetched map[int32]bool
	acquired   int
	released   int
}

func (x *fixtureExperts) Begin(_ context.Context, b *expert.Batch) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if b.Layer != x.layer {
		return nil
	}
	for _, e := range b.IDs {
		x.prefetched[e] = true
	}
	return nil
}

func (x *fixtureExperts) Get(_ context.Context, b *expert.Batch, i int) (*expert.Expert, error) {
	layer, e := b.Layer, int(b.IDs[i])
	x.mu.Lock()
	defer x.mu.Unlock()
	if layer != x.layer || e < 0 || e >= len(x.w) {
		return nil, fmt.Errorf("no expert %d in layer %d", e, layer)
	}
	if !x.prefetched[int32(e)] {
		return nil, fmt.Errorf("expert %d of layer %d acquired without a prefetch", e, layer)
	}
	x.acquired++
	return &expert.Expert{W: x.w[e]}, nil
}

func (x *fixtureExperts) Put(*expert.Batch, int) {
	x.mu.Lock()
	x.released++
	x.mu.Unlock()
}

func (x *fixtureExperts) End(*expert.Batch) {}

// loadMoE binds the MoE weights of a fixture whose keys carry prefix (""
// in moe.json, "mlp_" in the layer fixtures) into mats and vec, and returns
// an ExpertSource over the routed experts for layer l.
func loadMoE(t *testing.T, f *opFixture, c *Config, prefix string, l int, mats *LayerMats, vec *LayerVecs) *fixtureExperts {
	t.Helper()
	E, Ne, Lt, I := c.Hidden, c.Experts, c.LatentDim, c.MoEIntermediate
	S := c.SharedExperts * I
	mats.Router = f.linear(t, prefix+"gate_weight", Ne, E)
	mats.LatentDown = f.linear(t, prefix+"down_weight", Lt, E)
	mats.LatentUp = f.linear(t, prefix+"up_weight", E, Lt)
	mats.SharedGate = f.linear(t, prefix+"shared_w1_weight", S, E)
	mats.SharedUp = f.linear(t, prefix+"shared_w3_weight", S, E)
	mats.SharedDown = f.linear(t, prefix+"shared_w2_weight", E, S)
	vec.Bias = f.tensor(t, prefix+"e_score_correction_bias", Ne)
	vec.LatentNorm = f.tensor(t, prefix+"norm_weight", Lt)
	x := &fixtureExperts{layer: l, w: make([][3]Linear, Ne), prefetched: map[int32]bool{}}
	for e := range Ne {
		p := fmt.Sprintf("%sexperts_%d_", prefix, e)
		x.w[e] = [3]Linear{
			f.linear(t, p+"w1_weight", I, Lt),
			f.linear(t, p+"w2_weight", Lt, I),
			f.linear(t, p+"w3_weight", I, Lt),
		}
	}
	return x
}

// loadKDA binds a KDA attention's weights. name maps the catalogue's short
// names (q_proj, f_a, q_conv, A_log, …) to the fixture's keys.
func loadKDA(t *testing.T, f *opFixture, c *Config, name func(string) string, mats *LayerMats, vec *LayerVecs) {
	t.Helper()
	E, P, D, Hk, kc := c.Hidden, c.KDAWidth(), c.KDAHeadDim, c.KDAHeads, c.ConvKernel
	mats.QProj = f.linear(t, name("q_proj"), P, E)
	mats.KProj = f.linear(t, name("k_proj"), P, E)
	mats.VProj = f.linear(t, name("v_proj"), P, E)
	mats.GProj = f.linear(t, name("g_proj"), P, E)
	mats.OProj = f.linear(t, name("o_proj"), E, P)
	mats.FAProj = f.linear(t, name("f_a"), D, E)
	mats.FBProj = f.linear(t, name("f_b"), P, D)
	mats.BProj = f.linear(t, name("b_proj"), Hk, E)
	vec.QConv = f.tensor(t, name("q_conv"), P, 1, kc)
	vec.KConv = f.tensor(t, name("k_conv"), P, 1, kc)
	vec.VConv = f.tensor(t, name("v_conv"), P, 1, kc)
	vec.ALog = f.tensor(t, name("A_log"))[:Hk]
	vec.DTBias = f.tensor(t, name("dt_bias"), P)
	vec.ONorm = f.tensor(t, name("o_norm"), D)
}

// loadMLA binds a gated MLA attention's weights (keys prefix+<name>_weight).
func loadMLA(t *testing.T, f *opFixture, c *Config, prefix string, mats *LayerMats, vec *LayerVecs) {
	t.Helper()
	E, H, dh, Cq, Ckv, r, n, vh := c.Hidden, c.MLAHeads, c.MLAHeadDim(), c.QLoraRank, c.KVLoraRank, c.QKRopeDim, c.QKNopeDim, c.VHeadDim
	mats.QAProj = f.linear(t, prefix+"q_a_proj_weight", Cq, E)
	mats.QBProj = f.linear(t, prefix+"q_b_proj_weight", H*dh, Cq)
	mats.KVAProj = f.linear(t, prefix+"kv_a_proj_with_mqa_weight", Ckv+r, E)
	mats.KVBProj = f.linear(t, prefix+"kv_b_proj_weight", H*(n+vh), Ckv)
	mats.MLAOProj = f.linear(t, prefix+"o_proj_weight", E, H*vh)
	mats.MLAGProj = f.linear(t, prefix+"g_proj_weight", H*vh, E)
	vec.QANorm = f.tensor(t, prefix+"q_a_layernorm_weight", Cq)
	vec.KVANorm = f.tensor(t, prefix+"kv_a_layernorm_weight", Ckv)
}

// newOpSession builds a Model around c with no checkpoint (layer vectors in
// vecs, routed experts from experts) and a Session with scratch for T
// tokens. The pool has several workers so the parallel paths run.
// fixedLayers serves one set of matrices for every layer and part.
type fixedLayers struct{ mats *LayerMats }

func (f fixedLayers) Acquire(context.Context, int, Part) (*LayerMats, error) { return f.mats, nil }
func (f fixedLayers) Release(int, Part)                                      {}

func newOpSession(t *testing.T, c *Config, vecs []LayerVecs, experts expert.Source, T int) *Session {
	t.Helper()
	pool := par.New(4)
	t.Cleanup(pool.Close)
	if vecs == nil {
		vecs = make([]LayerVecs, c.Layers)
	}
	m := &Model{Cfg: c, Plan: &Plan{Cfg: c, vecs: vecs}, experts: experts, pool: pool, chunk: 64}
	s := &Session{m: m, st: NewState(c, 64), sc: NewScratch(c, T, T)}
	if err := s.st.reserve(T); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestOpsManifest(t *testing.T) {
	m := loadManifest(t)
	if m.Tolerance.Abs != 1e-5 || m.Tolerance.Rel != 1e-4 {
		t.Errorf("tolerance %+v, the spec documents abs 1e-5, rel 1e-4", *m.Tolerance)
	}
	c := opsConfig(t, m)
	if c.MoEIntermediate != 48 || c.Hidden != 128 || c.Layers != 13 {
		t.Errorf("MANIFEST config: I = %d, E = %d, NL = %d; want 48, 128, 13", c.MoEIntermediate, c.Hidden, c.Layers)
	}
	// The comparison itself must be able to fail.
	if _, _, ok := closeness([]float32{1.00011}, []float64{1}, m.Tolerance.Abs, m.Tolerance.Rel); ok {
		t.Error("1.00011 accepted as 1")
	}
	if _, _, ok := closeness([]float32{float32(math.NaN())}, []float64{1}, m.Tolerance.Abs, m.Tolerance.Rel); ok {
		t.Error("NaN accepted")
	}
	if _, _, ok := closeness([]float32{1.0001}, []float64{1}, m.Tolerance.Abs, m.Tolerance.Rel); !ok {
		t.Error("1.0001 rejected as 1")
	}
}

func TestOpRMSNorm(t *testing.T) {
	f, _ := loadOp(t, "rmsnorm.json")
	w := f.tensor(t, "weight", 128)
	in := f.tensor(t, "in", 3, 128)
	want := f.tensor64(t, "out", 3, 128)
	eps := float32(f.scalar(t, "eps"))
	got := make([]float32, len(in))
	for r := range 3 {
		rmsNorm(got[r*128:(r+1)*128], in[r*128:(r+1)*128], w, eps)
	}
	f.expect(t, "out", got, want)
	// In place gives the same bits.
	for r := range 3 {
		x := in[r*128 : (r+1)*128]
		rmsNorm(x, x, w, eps)
	}
	for i := range in {
		if math.Float32bits(in[i]) != math.Float32bits(got[i]) {
			t.Fatalf("in-place rmsNorm differs at %d: %v vs %v", i, in[i], got[i])
		}
	}
}

func TestOpSituGLU(t *testing.T) {
	f, _ := loadOp(t, "situ_glu.json")
	b1, b2 := float32(f.scalar(t, "beta")), float32(f.scalar(t, "linear_beta"))
	bound := f.scalar(t, "max_abs")
	if bound != float64(b1)*float64(b2) {
		t.Errorf("max_abs %v, want β1·β2 = %v", bound, b1*b2)
	}
	in := f.tensor(t, "in", 6, 16)
	want := f.tensor64(t, "out", 6, 8)
	got := make([]float32, 6*8)
	for r := range 6 {
		row := in[r*16 : (r+1)*16]
		situGLU(got[r*8:(r+1)*8], row[:8], row[8:], b1, b2)
	}
	f.expect(t, "out", got, want)
	for i, y := range got {
		if !(math.Abs(float64(y)) <= bound+1e-2) {
			t.Errorf("|y[%d]| = %v exceeds %v + 1e-2", i, y, bound)
		}
	}
}

func TestOpShortConv(t *testing.T) {
	f, _ := loadOp(t, "shortconv.json")
	kc, C := f.int(t, "kernel"), f.int(t, "channels")
	w := f.tensor(t, "weight", C, 1, kc)
	in := f.tensor(t, "in", 1, 5, C)
	hist := make([]float32, C*(kc-1))
	got := make([]float32, 5*C)
	for s := range 5 {
		shortConv(got[s*C:(s+1)*C], in[s*C:(s+1)*C], w, hist, kc)
	}
	f.expect(t, "out", got, f.tensor64(t, "out", 1, 5, C))
	f.expect(t, "state_after", hist, f.tensor64(t, "state_after", 1, C, kc-1))
	// The decode step continues from the carried history; x aliases y.
	next := f.tensor(t, "in_next", 1, 1, C)
	shortConv(next, next, w, hist, kc)
	f.expect(t, "out_next", next, f.tensor64(t, "out_next", 1, 1, C))

	t.Run("kernel1", func(t *testing.T) {
		// Kc = 1 has no history, but the conv and SiLU still run.
		x, w1 := []float32{2, -3}, []float32{0.5, 2}
		y := make([]float32, 2)
		shortConv(y, x, w1, nil, 1)
		for c := range x {
			if want := silu(w1[c] * x[c]); y[c] != want {
				t.Errorf("channel %d: %v, want silu(%v) = %v", c, y[c], w1[c]*x[c], want)
			}
		}
	})
}

func TestOpKDADecay(t *testing.T) {
	f, _ := loadOp(t, "kda_decay.json")
	const H, D = 4, 16
	glb := float32(f.scalar(t, "lower_bound"))
	aLog := f.tensor(t, "A_log", H)
	dt := f.tensor(t, "dt_bias", H*D)
	z := f.tensor(t, "z", 1, 4, H*D)
	T := 4
	g, alpha := make([]float32, T*H*D), make([]float32, T*H*D)
	for tk := range T {
		for h := range H {
			o := tk*H*D + h*D
			kdaDecay(g[o:o+D], alpha[o:o+D], z[o:o+D], dt[h*D:(h+1)*D], aLog[h], glb)
		}
	}
	// Absolute 1e-5 on both (§10.2).
	expectTol(t, "kda_decay g", g, f.tensor64(t, "g", 1, T, H, D), 1e-5, 0)
	expectTol(t, "kda_decay alpha", alpha, f.tensor64(t, "alpha", 1, T, H, D), 1e-5, 0)
	// g ∈ [glb, 0]: in f32 the sigmoid reaches 1 (g = glb) for large
	// arguments and underflows to 0 (g = −0, α = 1 exactly) below about −87.3.
	// The fixture counts only that underflow as saturation; α also rounds to
	// 1.0 in f32 wherever |g| < 3e-8, which is not counted.
	lo, hi, sat, ones := math.Inf(1), math.Inf(-1), 0, 0
	for i, a := range alpha {
		lo, hi = math.Min(lo, float64(a)), math.Max(hi, float64(a))
		if g[i] == 0 {
			sat++
		}
		if a == 1 {
			ones++
		}
		if !(g[i] <= 0 && g[i] >= glb) || !(a > 0 && a <= 1) {
			t.Errorf("g[%d] = %v, α = %v: outside [%v, 0], (0, 1]", i, g[i], a, glb)
		}
	}
	t.Logf("α range [%v, %v]; %d α round to 1.0 in f32, %d g underflow to 0", lo, hi, ones, sat)
	if math.Abs(lo-f.scalar(t, "alpha_min")) > 1e-5 || math.Abs(hi-f.scalar(t, "alpha_max")) > 1e-5 {
		t.Errorf("α range [%v, %v], fixture [%v, %v]", lo, hi, f.scalar(t, "alpha_min"), f.scalar(t, "alpha_max"))
	}
	if want := f.int(t, "n_alpha_saturated_at_1"); sat != want {
		t.Errorf("%d g underflow to 0 (α saturated at 1), fixture %d", sat, want)
	}
	if want := f.int(t, "n_alpha_total"); len(alpha) != want {
		t.Errorf("%d α values, fixture %d", len(alpha), want)
	}

	t.Run("saturation", func(t *testing.T) {
		// sigmoid underflows for very negative arguments: g = −0, α = 1
		// exactly, a legitimate value (trap 17).
		zz := []float32{-1000, 1000}
		gg, aa := make([]float32, 2), make([]float32, 2)
		kdaDecay(gg, aa, zz, []float32{0, 0}, 0, glb)
		if aa[0] != 1 || gg[0] != 0 {
			t.Errorf("z = −1000: g = %v, α = %v; want 0, 1", gg[0], aa[0])
		}
		if gg[1] != glb || aa[1] != float32(math.Exp(float64(glb))) {
			t.Errorf("z = +1000: g = %v, α = %v; want %v, e^%v", gg[1], aa[1], glb, glb)
		}
	})
}

// runRecurrence runs the delta rule over the fixture's q, k, v, either on
// the raw q and k or after an L2 norm of each head slice; q is scaled by
// qScale after the (optional) norm, as kda does.
func runRecurrence(f *opFixture, t *testing.T, l2 bool) (out, S []float32) {
	T, H, D := f.int(t, "T"), f.int(t, "H"), f.int(t, "d_k")
	qScale := float32(f.scalar(t, "q_scale"))
	q := f.tensor(t, "q", T, H, D)
	k := f.tensor(t, "k", T, H, D)
	v := f.tensor(t, "v", T, H, D)
	alpha := f.tensor(t, "alpha", T, H, D)
	beta := f.tensor(t, "beta", T, H)
	S = make([]float32, H*D*D)
	out = make([]float32, T*H*D)
	for tk := range T {
		for h := range H {
			o := (tk*H + h) * D
			qh := append([]float32(nil), q[o:o+D]...)
			kh := append([]float32(nil), k[o:o+D]...)
			if l2 {
				l2Norm(qh)
				l2Norm(kh)
			}
			for i := range qh {
				qh[i] *= qScale
			}
			kdaStep(S[h*D*D:(h+1)*D*D], qh, kh, v[o:o+D], alpha[o:o+D], beta[tk*H+h], out[o:o+D])
		}
	}
	return out, S
}

// The recurrence fixtures feed q, k and v to the recurrence as stored: the
// delta rule is checked on un-normalised q and k (norms ≈ 3–5), with only
// the q scale applied. Applying L2Norm first gives a different state, far
// outside tolerance, so the fixture tells the two readings apart.
func TestOpKDARecurrence(t *testing.T) {
	for _, name := range []string{"kda_recur1.json", "kda_recur8.json"} {
		t.Run(name, func(t *testing.T) {
			f, _ := loadOp(t, name)
			T, H, D := f.int(t, "T"), f.int(t, "H"), f.int(t, "d_k")
			if dv := f.int(t, "d_v"); dv != D {
				t.Fatalf("d_v %d ≠ d_k %d", dv, D)
			}
			if qs := f.scalar(t, "q_scale"); qs != 1/math.Sqrt(float64(D)) {
				t.Errorf("q_scale %v, want 1/sqrt(%d)", qs, D)
			}
			wantOut, wantS := f.tensor64(t, "out", T, H, D), f.tensor64(t, "state_out", H, D, D)
			out, S := runRecurrence(f, t, false)
			f.expect(t, "out", out, wantOut)
			f.expect(t, "state_out", S, wantS)

			out, S = runRecurrence(f, t, true)
			wo, _, okO := closeness(out, wantOut, f.tol.Abs, f.tol.Rel)
			ws, _, okS := closeness(S, wantS, f.tol.Abs, f.tol.Rel)
			t.Logf("with L2-normed q, k: out %.3g×, state %.3g× the tolerance", wo, ws)
			if okO || okS {
				t.Errorf("L2-normed q and k also match (out %v, state %v): the fixture cannot tell the readings apart", okO, okS)
			}
		})
	}
}

func TestOpKDALayer(t *testing.T) {
	for _, name := range []string{"kda_layer1.json", "kda_layer8.json"} {
		t.Run(name, func(t *testing.T) {
			f, m := loadOp(t, name)
			c := opsConfig(t, m)
			c.KDAHeads, c.KDAHeadDim, c.ConvKernel = f.int(t, "H"), f.int(t, "d_k"), f.int(t, "conv_k")
			c.GateLowerBound, c.RMSNormEps = float32(f.scalar(t, "lower_bound")), float32(f.scalar(t, "rms_eps"))
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			const l = 0 // a KDA layer
			T, E, D, Hk := f.int(t, "T"), c.Hidden, c.KDAHeadDim, c.KDAHeads
			vecs := make([]LayerVecs, c.Layers)
			var mats LayerMats
			loadKDA(t, f, c, func(s string) string { return s }, &mats, &vecs[l])
			in := f.tensor(t, "in", 1, T, E)
			want, wantS := f.tensor64(t, "out", 1, T, E), f.tensor64(t, "state_out", 1, Hk, D, D)

			// Whole sequence at once.
			s := newOpSession(t, c, vecs, nil, T)
			copy(s.sc.xn, in)
			s.kda(l, &mats, &vecs[l], T)
			out := append([]float32(nil), s.sc.attn[:T*E]...)
			f.expect(t, "out", out, want)
			f.expect(t, "state_out", s.st.kda[l].S, wantS)

			// One token at a time, the conv histories and S carried: the
			// same bits (each token gets the one-token arithmetic).
			s2 := newOpSession(t, c, vecs, nil, 1)
			for tk := range T {
				copy(s2.sc.xn, in[tk*E:(tk+1)*E])
				s2.kda(l, &mats, &vecs[l], 1)
				for i := range E {
					if a, b := s2.sc.attn[i], out[tk*E+i]; math.Float32bits(a) != math.Float32bits(b) {
						t.Fatalf("token %d element %d: step-by-step %v, whole sequence %v", tk, i, a, b)
					}
				}
			}
			for i, v := range s2.st.kda[l].S {
				if math.Float32bits(v) != math.Float32bits(s.st.kda[l].S[i]) {
					t.Fatalf("state element %d: step-by-step %v, whole sequence %v", i, v, s.st.kda[l].S[i])
				}
			}
		})
	}
}

// routeAll computes router scores for T tokens from gate w and selects
// top-k with bias; it returns idx and weights [T][K] and the scores.
func routeAll(s *Session, w *Linear, bias []float32, T int) ([]int32, []float32, []float32) {
	c := s.m.Cfg
	K, Ne := c.TopK, c.Experts
	s.routerScores(w, T)
	idx, wts := make([]int32, T*K), make([]float32, T*K)
	for tk := range T {
		topK(idx[tk*K:(tk+1)*K], wts[tk*K:(tk+1)*K], s.sc.scores[tk*Ne:(tk+1)*Ne], bias, s.sc.choice, c.MoERenormalize, c.RoutedScale)
	}
	return idx, wts, append([]float32(nil), s.sc.scores[:T*Ne]...)
}

func TestOpRouter(t *testing.T) {
	f, m := loadOp(t, "router.json")
	c := opsConfig(t, m)
	c.TopK, c.Experts = f.int(t, "top_k"), f.int(t, "n_experts")
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	K, Ne, E := c.TopK, c.Experts, c.Hidden
	gw := f.tensor(t, "gate_weight", Ne, E)
	bias := f.tensor(t, "bias", Ne)
	in := f.tensor(t, "in", 6, E)
	T := 6
	wantIdx, wantW := f.tensor64(t, "topk_idx", T, K), f.tensor64(t, "topk_weight", T, K)

	s := newOpSession(t, c, nil, nil, T)
	copy(s.sc.xn, in)
	gate := Linear{Dense: f32Mat(gw, Ne, E)}
	idx, wts, _ := routeAll(s, &gate, bias, T)

	// Index sets equal per row; weights matched by expert id.
	got, want := make([]float32, T*K), make([]float64, T*K)
	for tk := range T {
		for j := range K {
			e := int32(wantIdx[tk*K+j])
			if float64(e) != wantIdx[tk*K+j] || e < 0 || int(e) >= Ne {
				t.Fatalf("row %d: bad fixture index %v", tk, wantIdx[tk*K+j])
			}
			found := -1
			for jj := range K {
				if idx[tk*K+jj] == e {
					found = jj
				}
			}
			if found < 0 {
				t.Errorf("row %d: selected %v, want the set %v", tk, idx[tk*K:(tk+1)*K], wantIdx[tk*K:(tk+1)*K])
				got[tk*K+j] = float32(math.NaN())
			} else {
				got[tk*K+j] = wts[tk*K+found]
			}
			want[tk*K+j] = wantW[tk*K+j]
		}
		// Selection order is descending biased score.
		sc := s.sc.scores[tk*Ne : (tk+1)*Ne]
		for j := 1; j < K; j++ {
			a, b := idx[tk*K+j-1], idx[tk*K+j]
			if sc[a]+bias[a] < sc[b]+bias[b] {
				t.Errorf("row %d: slot %d (expert %d) has a lower biased score than slot %d (expert %d)", tk, j-1, a, j, b)
			}
		}
	}
	f.expect(t, "topk_weight", got, want)

	// The bias steers selection in the documented number of rows: without
	// it, that many rows select a different set.
	noBias := make([]float32, Ne)
	idx0, _, _ := routeAll(s, &gate, noBias, T)
	changed := 0
	for tk := range T {
		if !sameSet(idx[tk*K:(tk+1)*K], idx0[tk*K:(tk+1)*K]) {
			changed++
		}
	}
	if want := f.int(t, "rows_where_bias_changed_selection"); changed != want {
		t.Errorf("bias changed the selection in %d rows, fixture says %d", changed, want)
	}

	t.Run("bf16", func(t *testing.T) {
		// A BF16 gate and its exact F32 widening give identical scores,
		// selections and weights.
		bf := make([]byte, 2*len(gw))
		wide := make([]float32, len(gw))
		for i, v := range gw {
			b := tensor.F32ToBF16(v)
			binary.LittleEndian.PutUint16(bf[2*i:], b)
			wide[i] = tensor.BF16ToF32(b)
		}
		gBF := Linear{Dense: tensor.Mat{DType: tensor.BF16, Rows: Ne, Cols: E, Data: bf}}
		gF := Linear{Dense: f32Mat(wide, Ne, E)}
		i1, w1, s1 := routeAll(s, &gBF, bias, T)
		i2, w2, s2 := routeAll(s, &gF, bias, T)
		for i := range s1 {
			if math.Float32bits(s1[i]) != math.Float32bits(s2[i]) {
				t.Fatalf("score %d: BF16 gate %v, F32 widening %v", i, s1[i], s2[i])
			}
		}
		for i := range i1 {
			if i1[i] != i2[i] || math.Float32bits(w1[i]) != math.Float32bits(w2[i]) {
				t.Fatalf("slot %d: BF16 (%d, %v), F32 (%d, %v)", i, i1[i], w1[i], i2[i], w2[i])
			}
		}
	})
}

func sameSet(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		found := false
		for _, y := range b {
			found = found || x == y
		}
		if !found {
			return false
		}
	}
	return true
}

func TestOpAttnRes(t *testing.T) {
	f, _ := loadOp(t, "attnres.json")
	const T, NB, E = 4, 8, 128
	if n := f.int(t, "n_sources"); n != NB+1 {
		t.Fatalf("n_sources %d, want %d", n, NB+1)
	}
	eps := float32(f.scalar(t, "eps"))
	norm, proj := f.tensor(t, "norm_weight", E), f.tensor(t, "proj_weight", E)
	fl := fold(norm, proj)
	f.expect(t, "fold_hint", fl, f.tensor64(t, "fold_hint", E))
	pref := f.tensor(t, "prefix_sum", T, E)
	blocks := f.tensor(t, "block_residual", T, NB, E)
	got := make([]float32, T*E)
	scratch := make([]float32, NB+1)
	for tk := range T {
		src := make([][]float32, 0, NB+1)
		for b := range NB {
			src = append(src, blocks[(tk*NB+b)*E:(tk*NB+b+1)*E])
		}
		src = append(src, pref[tk*E:(tk+1)*E])
		attnRes(got[tk*E:(tk+1)*E], src, fl, eps, scratch)
	}
	f.expect(t, "out", got, f.tensor64(t, "out", T, E))
}

func TestOpMLA(t *testing.T) {
	f, m := loadOp(t, "mla.json")
	c := opsConfig(t, m)
	c.QKNopeDim, c.QKRopeDim, c.KVLoraRank, c.QLoraRank = f.int(t, "qk_nope"), f.int(t, "qk_rope"), f.int(t, "kv_lora"), f.int(t, "q_lora")
	c.VHeadDim, c.MLAHeads, c.RMSNormEps = f.int(t, "v_head"), f.int(t, "n_heads"), float32(f.scalar(t, "rms_eps"))
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if sc, want := f.scalar(t, "scale"), 1/math.Sqrt(float64(c.QKNopeDim+c.QKRopeDim)); math.Abs(sc-want) > 1e-12 {
		t.Errorf("fixture scale %v, want 1/sqrt(n+r) = %v", sc, want)
	}
	const l = 3 // an MLA layer of the tiny map
	if !c.IsMLA(l) {
		t.Fatalf("layer %d is not MLA", l)
	}
	T, E, Ckv, r := 6, c.Hidden, c.KVLoraRank, c.QKRopeDim
	vecs := make([]LayerVecs, c.Layers)
	var mats LayerMats
	loadMLA(t, f, c, "", &mats, &vecs[l])
	in := f.tensor(t, "in", 1, T, E)
	want := f.tensor64(t, "out", 1, T, E)

	s := newOpSession(t, c, vecs, nil, T)
	copy(s.sc.xn, in)
	s.mla(l, &mats, &vecs[l], T)
	out := append([]float32(nil), s.sc.attn[:T*E]...)
	f.expect(t, "out", out, want)
	f.expect(t, "kv_latent", s.st.mla[l].lat, f.tensor64(t, "kv_latent", 1, T, Ckv))
	f.expect(t, "k_rope", s.st.mla[l].kr, f.tensor64(t, "k_rope", 1, T, r))

	// Incremental: one token at a time against the growing latent cache.
	s2 := newOpSession(t, c, vecs, nil, 1)
	if err := s2.st.reserve(T); err != nil {
		t.Fatal(err)
	}
	for tk := range T {
		copy(s2.sc.xn, in[tk*E:(tk+1)*E])
		s2.mla(l, &mats, &vecs[l], 1)
		s2.st.pos++
		for i := range E {
			if a, b := s2.sc.attn[i], out[tk*E+i]; math.Float32bits(a) != math.Float32bits(b) {
				t.Fatalf("token %d element %d: incremental %v, whole sequence %v", tk, i, a, b)
			}
		}
	}
}

func TestOpMoE(t *testing.T) {
	f, m := loadOp(t, "moe.json")
	c := opsConfig(t, m)
	c.Hidden, c.LatentDim, c.MoEIntermediate = f.int(t, "hidden"), f.int(t, "latent"), f.int(t, "moe_inter")
	c.Experts, c.TopK, c.SharedExperts = f.int(t, "n_experts"), f.int(t, "top_k"), f.int(t, "n_shared")
	c.RoutedScale, c.RMSNormEps = float32(f.scalar(t, "routed_scale")), float32(f.scalar(t, "rms_eps"))
	c.MoERenormalize, c.LatentMoENorm = f.scalar(t, "renorm") != 0, f.scalar(t, "latent_norm") != 0
	c.SituBeta, c.SituLinearBeta = float32(f.scalar(t, "situ_b1")), float32(f.scalar(t, "situ_b2"))
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	const l = 1 // a MoE layer
	T, E := 3, c.Hidden
	vecs := make([]LayerVecs, c.Layers)
	var mats LayerMats
	experts := loadMoE(t, f, c, "", l, &mats, &vecs[l])
	in := f.tensor(t, "in", 1, T, E)
	s := newOpSession(t, c, vecs, experts, T)
	copy(s.sc.xn, in)
	if err := s.moe(context.Background(), l, &mats, &vecs[l], T); err != nil {
		t.Fatal(err)
	}
	out := append([]float32(nil), s.sc.ffn[:T*E]...)
	f.expect(t, "out", out, f.tensor64(t, "out", 1, T, E))

	// One token at a time gives the bits of the batched expert union.
	s1 := newOpSession(t, c, vecs, experts, 1)
	for tk := range T {
		copy(s1.sc.xn, in[tk*E:(tk+1)*E])
		if err := s1.moe(context.Background(), l, &mats, &vecs[l], 1); err != nil {
			t.Fatal(err)
		}
		for i := range E {
			if a, b := s1.sc.ffn[i], out[tk*E+i]; math.Float32bits(a) != math.Float32bits(b) {
				t.Fatalf("token %d element %d: one token %v, batched %v", tk, i, a, b)
			}
		}
	}
	if experts.acquired == 0 || experts.acquired != experts.released {
		t.Errorf("%d experts acquired, %d released", experts.acquired, experts.released)
	}

	t.Run("failed expert", func(t *testing.T) {
		// An expert that cannot be loaded fails the layer.
		broken := &brokenExperts{Source: experts, fail: int(s.sc.idx[0])}
		s := newOpSession(t, c, vecs, broken, T)
		copy(s.sc.xn, f.tensor(t, "in", 1, T, E))
		if err := s.moe(context.Background(), l, &mats, &vecs[l], T); !errors.Is(err, errBrokenExpert) {
			t.Fatalf("moe with an expert that cannot be loaded: error %v", err)
		}
	})
}

type brokenExperts struct {
	expert.Source
	fail int
}

var errBrokenExpert = errors.New("expert unavailable")

func (b *brokenExperts) Get(ctx context.Context, bt *expert.Batch, i int) (*expert.Expert, error) {
	if int(bt.IDs[i]) == b.fail {
		return nil, errBrokenExpert
	}
	return b.Source.Get(ctx, bt, i)
}

func TestOpLayer(t *testing.T) {
	for _, tc := range []struct {
		file     string
		l, nbOut int
	}{{"layer_kda.json", 1, 2}, {"layer_mla.json", 3, 3}} {
		t.Run(tc.file, func(t *testing.T) {
			f, m := loadOp(t, tc.file)
			c := opsConfig(t, m)
			c.AttnResBlock, c.RMSNormEps, c.Hidden = f.int(t, "attn_res_block_size"), float32(f.scalar(t, "rms_eps")), f.int(t, "hidden")
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			l := f.int(t, "layer_idx")
			var isMLA bool
			if err := json.Unmarshal(f.raw["is_mla"], &isMLA); err != nil {
				t.Fatal(err)
			}
			if l != tc.l || c.IsMLA(l) != isMLA {
				t.Fatalf("layer %d (is_mla %v); the config maps it to MLA = %v", l, isMLA, c.IsMLA(l))
			}
			const T, nbIn = 4, 2
			E, nbMax := c.Hidden, c.NumBoundaries()
			vecs := make([]LayerVecs, c.Layers)
			v := &vecs[l]
			var mats LayerMats
			if isMLA {
				loadMLA(t, f, c, "self_attn_", &mats, v)
			} else {
				key := map[string]string{"f_a": "f_a_proj", "f_b": "f_b_proj", "q_conv": "q_conv1d", "k_conv": "k_conv1d", "v_conv": "v_conv1d", "o_norm": "o_norm"}
				loadKDA(t, f, c, func(s string) string {
					if s == "A_log" || s == "dt_bias" {
						return "self_attn_" + s
					}
					if k, ok := key[s]; ok {
						s = k
					}
					return "self_attn_" + s + "_weight"
				}, &mats, v)
			}
			experts := loadMoE(t, f, c, "mlp_", l, &mats, v)
			v.InNorm = f.tensor(t, "input_layernorm_weight", E)
			v.PostNorm = f.tensor(t, "post_attention_layernorm_weight", E)
			v.FoldA = fold(f.tensor(t, "self_attention_res_norm_weight", E), f.tensor(t, "self_attention_res_proj_weight", 1, E))
			v.FoldM = fold(f.tensor(t, "mlp_res_norm_weight", E), f.tensor(t, "mlp_res_proj_weight", 1, E))

			s := newOpSession(t, c, vecs, experts, T)
			copy(s.sc.pref, f.tensor(t, "in", 1, T, E))
			blocksIn := f.tensor(t, "block_residual_in", T, nbIn, E)
			for tk := range T {
				for b := range nbIn {
					copy(s.sc.blocks[(tk*nbMax+b)*E:(tk*nbMax+b+1)*E], blocksIn[(tk*nbIn+b)*E:(tk*nbIn+b+1)*E])
				}
			}
			nb := nbIn
			s.m.layers = fixedLayers{&mats}
			if err := s.layer(context.Background(), l, T, &nb, nbMax); err != nil {
				t.Fatal(err)
			}
			if nb != tc.nbOut {
				t.Fatalf("%d blocks after the layer, want %d", nb, tc.nbOut)
			}
			f.expect(t, "out", s.sc.pref[:T*E], f.tensor64(t, "out", 1, T, E))
			got := make([]float32, 0, T*nb*E)
			for tk := range T {
				got = append(got, s.sc.blocks[tk*nbMax*E:(tk*nbMax+nb)*E]...)
			}
			f.expect(t, "block_residual_out", got, f.tensor64(t, "block_residual_out", T, tc.nbOut, E))
		})
	}
}
