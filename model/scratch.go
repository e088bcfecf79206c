package model

import (
	"fmt"
	"unsafe"

	"github.com/k3go/k3/expert"
)

// Scratch holds the buffers of a forward pass over up to Rows token rows,
// summed over the sequences in the pass. A pass reads each weight part
// once for all its rows, and computes the rows in tiles of at most Tile
// rows while the part is in memory: what must live across the whole pass
// (the residual stream and its block snapshots, the MoE routing, the
// latent inputs and the per-slot expert outputs) is sized for Rows, the
// rest of an op's intermediates for Tile. So a pass of many rows (a long
// prompt's prefill) costs little more memory than a tile, and the weights
// are still read from disk once. A Scratch belongs to the caller that runs
// passes (one per concurrent pass, not one per sequence) and is reused, so
// decoding allocates nothing per token. It is not safe for concurrent use.
type Scratch struct {
	rows, tile int

	// Across the pass, [rows]…
	pref, ffn []float32 // [rows][E]: the running residual; the FFN output
	blocks    []float32 // [rows][NB][E]: the attention-residual snapshots
	idx       []int32   // [rows][K]: the experts each row chose
	wts       []float32 // [rows][K]
	zl        []float32 // [rows][Lt]: the latent input of the experts
	contrib   []float32 // [rows][K][Lt]: each chosen expert's output
	users     []int32   // per expert: row*K + slot, [rows·K]
	first     []int32   // expert union in first-seen order
	seen      []int32   // [Ne] position+1 in first, 0 if unseen
	uses      []int32   // per union index: the rows that chose it
	ustart    []int32   // per union index: where its run of users starts
	cursor    []int32   // bucketing scratch

	// … and per tile, [tile].
	x, xn, attn []float32 // [tile][E]
	sources     [][]float32
	arScore     []float32

	// KDA
	q, k, v, g, z, o []float32 // [tile][P]
	bl               []float32 // [tile][Hk]
	fa               []float32 // [tile][D]
	beta             []float32 // [tile][Hk]

	// MLA
	qa     []float32 // [tile][Cq]
	qm     []float32 // [tile][H·dh]
	ckv    []float32 // [tile][Ckv+r]
	mo, mg []float32 // [tile][H·vh]
	heads  []mlaHeadScratch

	// MoE
	scores []float32 // [tile][Ne]
	choice []float32 // [Ne]
	accL   []float32 // [tile][Lt]
	xg     []float32 // [tile][Lt] gathered expert inputs
	a1, a3 []float32 // [tile][I]
	eo     []float32 // [tile][Lt]
	sg, su []float32 // [tile][max(Ns·I, Id)]

	batch  expert.Batch
	rowBuf []byte    // one embedding row read from disk, with alignment slack
	segs   []segment // the sequences of the current pass, rows of the pass
	tsegs  []segment // the current tile's share of them, rows of the tile
	picks  []pick    // a tile of rows whose logits are wanted
	pass   pass      // the current pass (kept here so it is not allocated)
	kdaJob kdaJob
	mlaJob mlaJob

	// A cluster pass's rounds (round.go).
	round     Round
	rwork     RoundWork
	passHeads passHeads // rank 0's heads of a RoundKDA round's states
	// A cluster pass's chunk of expert rows: their latent inputs, the up
	// halves' results, the down halves' (moe.go, expertRounds).
	cxg, ca1, ceo []float32
	// cpick[u] is the row of cxg user u of a chunk reads (its pass row's
	// place among the chunk's distinct rows); crow maps a pass row to that
	// place while a chunk is built (-1: not yet in it).
	cpick, crow []int32
	logits      []float32 // a tile of rows' logits (logitBuf)
	local       localRound
	localRun    func() error
}

// growChunk makes the chunk buffers of a cluster pass's expert rounds hold
// n (row, expert) pairs; they grow once, to the widest chunk.
func (s *Scratch) growChunk(n, lt, inter int) {
	if len(s.cxg) < n*lt {
		s.cxg, s.ceo = make([]float32, n*lt), make([]float32, n*lt)
		s.cpick = make([]int32, n)
	}
	if len(s.ca1) < n*inter {
		s.ca1 = make([]float32, n*inter)
	}
	if len(s.crow) < s.rows {
		s.crow = make([]int32, s.rows)
		for i := range s.crow {
			s.crow[i] = -1
		}
	}
}

// logitBuf returns n floats for a cluster pass's logits of several
// sequences (one process writes them through contrib, by vocabulary
// blocks; a cluster's rounds carry whole rows).
func (s *Scratch) logitBuf(n int) []float32 {
	if len(s.logits) < n {
		s.logits = make([]float32, n)
	}
	return s.logits[:n]
}

// Rows returns the number of token rows one pass over the scratch carries.
func (s *Scratch) Rows() int { return s.rows }

// Tile returns the number of rows an op computes at once.
func (s *Scratch) Tile() int { return s.tile }

type mlaHeadScratch struct {
	qabs, ctx []float32 // [Ckv]
	qw        []float64 // [Ckv+r]: qabs and the rope query, widened
	p         []float32 // [positions]
}

// DefaultTile is the tile of NewScratch when none is given: enough rows
// that the kernels' multi-row products reach their speed.
const DefaultTile = 32

// NewScratch allocates the buffers of passes of up to rows token rows,
// computed in tiles of tile rows (0: DefaultTile); the tile is at most
// rows.
func NewScratch(c *Config, rows, tile int) *Scratch {
	rows, tile = scratchShape(rows, tile)
	return buildScratch(c, rows, tile, heapScratch{})
}

// NewScratchIn lays out the buffers of passes of up to rows token rows
// (tiles of tile rows, 0: DefaultTile) in mem, which must hold
// ScratchArenaBytes(c, rows, tile) bytes, instead of on the Go heap: the
// engine lends a wide prefill pass memory that otherwise holds weights
// (an expert cache, pinned trunk parts), so the room is used by whichever
// work runs. The Scratch is valid while mem is; mem must not be used for
// anything else meanwhile. A pass computes the same bits in either kind of
// scratch.
func NewScratchIn(c *Config, rows, tile int, mem []byte) (*Scratch, error) {
	rows, tile = scratchShape(rows, tile)
	if need := ScratchArenaBytes(c, rows, tile); int64(len(mem)) < need {
		return nil, fmt.Errorf("scratch for %d rows needs %d bytes, have %d", rows, need, len(mem))
	}
	return buildScratch(c, rows, tile, &carveScratch{mem: mem}), nil
}

// ScratchArenaBytes returns the bytes NewScratchIn lays out in its memory
// for passes of rows rows in tiles of tile rows: every buffer NewScratch
// would allocate, each aligned to a cache line. What a pass allocates
// beside them (ScratchBytes less the buffers) stays on the heap.
func ScratchArenaBytes(c *Config, rows, tile int) int64 {
	rows, tile = scratchShape(rows, tile)
	n := countScratch{n: scratchLine} // the first buffer's alignment
	buildScratch(c, rows, tile, &n)
	return n.n
}

// scratchAlloc provides a Scratch's buffers: on the heap, carved from one
// block of memory, or only counted.
type scratchAlloc interface {
	f32(n int) []float32
	i32(n int) []int32
	bytes(n int) []byte
}

type heapScratch struct{}

func (heapScratch) f32(n int) []float32 { return make([]float32, n) }
func (heapScratch) i32(n int) []int32   { return make([]int32, n) }
func (heapScratch) bytes(n int) []byte  { return make([]byte, n) }

// scratchLine is the alignment of every carved buffer (a cache line, so no
// two buffers written by different threads share one).
const scratchLine = 64

func lineUp(n int) int { return (n + scratchLine - 1) &^ (scratchLine - 1) }

// countScratch counts the bytes carveScratch would take.
type countScratch struct{ n int64 }

func (c *countScratch) f32(n int) []float32 { c.n += int64(lineUp(4 * n)); return nil }
func (c *countScratch) i32(n int) []int32   { c.n += int64(lineUp(4 * n)); return nil }
func (c *countScratch) bytes(n int) []byte  { c.n += int64(lineUp(n)); return nil }

// carveScratch hands out consecutive, line-aligned pieces of mem, zeroed
// (memory lent by the engine holds other data before).
type carveScratch struct {
	mem []byte
	off int
}

func (c *carveScratch) bytes(n int) []byte {
	base := uintptr(unsafe.Pointer(unsafe.SliceData(c.mem)))
	start := int((base+uintptr(c.off)+scratchLine-1)&^(scratchLine-1) - base)
	b := c.mem[start : start+n : start+n]
	clear(b)
	c.off = start + n
	return b
}

func (c *carveScratch) f32(n int) []float32 {
	if n == 0 {
		return []float32{}
	}
	b := c.bytes(4 * n)
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

func (c *carveScratch) i32(n int) []int32 {
	if n == 0 {
		return []int32{}
	}
	b := c.bytes(4 * n)
	return unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

func scratchShape(rows, tile int) (int, int) {
	rows = max(rows, 1)
	if tile <= 0 {
		tile = DefaultTile
	}
	return rows, min(tile, rows)
}

// scratchSizes returns the length of every buffer NewScratch allocates, in
// 4-byte words.
func scratchSizes(c *Config, rows, tile int) []int {
	rows, tile = scratchShape(rows, tile)
	var sz sizeScratch
	buildScratch(c, rows, tile, &sz)
	return sz.words
}

// sizeScratch records every buffer's length in 4-byte words.
type sizeScratch struct{ words []int }

func (s *sizeScratch) f32(n int) []float32 { s.words = append(s.words, n); return nil }
func (s *sizeScratch) i32(n int) []int32   { s.words = append(s.words, n); return nil }
func (s *sizeScratch) bytes(n int) []byte  { s.words = append(s.words, n/4); return nil }

// buildScratch lays out the scratch buffers through a, so that the memory
// planner counts exactly what a pass allocates.
func buildScratch(c *Config, rows, tile int, a scratchAlloc) *Scratch {
	E, P, D, Hk := c.Hidden, c.KDAWidth(), c.KDAHeadDim, c.KDAHeads
	K, Lt := c.TopK, c.LatentDim
	nb := c.NumBoundaries()
	f, i32 := a.f32, a.i32
	R, T := rows, tile
	s := &Scratch{rows: R, tile: T,
		pref: f(R * E), ffn: f(R * E), blocks: f(R * nb * E),
		wts: f(R * K), zl: f(R * Lt), contrib: f(R * K * Lt),
		idx: i32(R * K), users: i32(R * K), first: i32(R * K)[:0],
		uses: i32(R * K), ustart: i32(R*K + 1), cursor: i32(R * K), seen: i32(c.Experts),

		x: f(T * E), xn: f(T * E), attn: f(T * E),
		sources: make([][]float32, 0, nb+1), arScore: f(nb + 1),
		q: f(T * P), k: f(T * P), v: f(T * P), g: f(T * P), z: f(T * P), o: f(T * P),
		bl: f(T * Hk), fa: f(T * D), beta: f(T * Hk),
		qa: f(T * c.QLoraRank), qm: f(T * c.MLAHeads * c.MLAHeadDim()), ckv: f(T * (c.KVLoraRank + c.QKRopeDim)),
		mo: f(T * c.MLAHeads * c.VHeadDim), mg: f(T * c.MLAHeads * c.VHeadDim),
		heads:  make([]mlaHeadScratch, c.MLAHeads),
		scores: f(T * c.Experts), choice: f(c.Experts),
		accL: f(T * Lt), xg: f(T * Lt), a1: f(T * c.MoEIntermediate), a3: f(T * c.MoEIntermediate), eo: f(T * Lt),
		segs: make([]segment, 0, R), tsegs: make([]segment, 0, T), picks: make([]pick, 0, T),
	}
	s.rowBuf = a.bytes(c.Hidden*4 + 2*Align)
	wide := c.SharedExperts * c.MoEIntermediate
	if c.FirstKDense > 0 {
		wide = max(wide, c.DenseIntermediate)
	}
	s.sg, s.su = f(T*wide), f(T*wide)
	for h := range s.heads {
		s.heads[h] = mlaHeadScratch{qabs: f(c.KVLoraRank), ctx: f(c.KVLoraRank), qw: make([]float64, c.KVLoraRank+c.QKRopeDim)}
	}
	return s
}
