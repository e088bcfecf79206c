package model

import (
	"errors"
	"fmt"
)

// ErrContextFull reports a sequence that would exceed the session's
// context capacity (the MLA cache is sized when the session is created).
var ErrContextFull = errors.New("context full")

// State is the per-sequence state of the model: the KDA recurrent state and
// short-conv histories of every KDA layer, the latent MLA cache of every
// MLA layer, and the number of positions consumed. Several States can share
// one Model; a State is not safe for concurrent use.
type State struct {
	cfg *Config
	kda []kdaState // by layer; zero for MLA layers
	mla []mlaState // by layer; zero for KDA layers
	pos int
	cap int

	spec *specRecord // speculation bookkeeping, nil until first used
	lent bool        // spec is a SpecBuffer's, given back when the speculation ends

	// In a cluster (heads.go): the id the ranks keep their KDA heads of
	// this state under; away while theirs are the current ones (rank 0's
	// arrays hold only its own heads then); tracked once the ranks are to
	// be told when it is gone.
	id      uint64
	away    bool
	tracked bool
	// heads is the KDA heads the state's arrays hold, the first ones:
	// every head, or on rank 0 of a cluster only its own (Model.NewState),
	// the others' being on their ranks for good.
	heads int
}

type kdaState struct {
	S          []float32 // [Hk][D][D]: row = key channel, column = value channel
	qh, kh, vh []float32 // [P][Kc-1] conv histories, oldest first
}

type mlaState struct {
	lat []float32 // [pos][Ckv] normalised latents
	kr  []float32 // [pos][r] raw rope keys
}

// NewState allocates the recurrent state for a sequence of up to capacity
// positions. The MLA cache grows on demand up to that capacity.
func NewState(cfg *Config, capacity int) *State { return newState(cfg, capacity, cfg.KDAHeads) }

// newState allocates a state holding the first heads KDA heads.
func newState(cfg *Config, capacity, heads int) *State {
	s := &State{cfg: cfg, kda: make([]kdaState, cfg.Layers), mla: make([]mlaState, cfg.Layers), cap: capacity, id: stateIDs.Add(1), heads: heads}
	D, h := cfg.KDAHeadDim, cfg.ConvKernel-1
	W := heads * D
	for l := 0; l < cfg.Layers; l++ {
		if cfg.IsMLA(l) {
			continue
		}
		s.kda[l] = kdaState{
			S:  make([]float32, heads*D*D),
			qh: make([]float32, W*h), kh: make([]float32, W*h), vh: make([]float32, W*h),
		}
	}
	return s
}

// partial reports a state holding only some of the KDA heads (rank 0's).
func (s *State) partial() bool { return s.heads < s.cfg.KDAHeads }

// StateBytes returns the fixed bytes of one State (without the MLA cache)
// and the bytes the MLA cache needs per position.
func StateBytes(cfg *Config) (fixed, perPosition int64) {
	P, D, Hk, h := int64(cfg.KDAWidth()), int64(cfg.KDAHeadDim), int64(cfg.KDAHeads), int64(cfg.ConvKernel-1)
	nMLA := int64(cfg.NumMLA())
	nKDA := int64(cfg.Layers) - nMLA
	fixed = nKDA * (Hk*D*D + 3*P*h) * 4
	perPosition = nMLA * int64(cfg.KVLoraRank+cfg.QKRopeDim) * 4
	return fixed, perPosition
}

// ID returns the id the ranks of a cluster keep their KDA heads of s
// under (no other State of the process has had it).
func (s *State) ID() uint64 { return s.id }

// Len returns the number of positions consumed.
func (s *State) Len() int { return s.pos }

// Cap returns the position capacity.
func (s *State) Cap() int { return s.cap }

// Reset clears the state to the start of a sequence, keeping allocations.
func (s *State) Reset() {
	for l := range s.kda {
		k := &s.kda[l]
		clear(k.S)
		clear(k.qh)
		clear(k.kh)
		clear(k.vh)
	}
	for l := range s.mla {
		m := &s.mla[l]
		m.lat, m.kr = m.lat[:0], m.kr[:0]
	}
	s.pos = 0
	s.away = false // every rank's heads are zero; the next split pass says so
	s.endSpec()
}

// reserve makes room in every MLA cache for n more positions.
func (s *State) reserve(n int) error {
	need := s.pos + n
	if need > s.cap {
		return fmt.Errorf("%w: %d positions would exceed the capacity of %d", ErrContextFull, need, s.cap)
	}
	ckv, r := s.cfg.KVLoraRank, s.cfg.QKRopeDim
	for l := range s.mla {
		if !s.cfg.IsMLA(l) {
			continue
		}
		m := &s.mla[l]
		if cap(m.lat) < need*ckv {
			// Grow geometrically, bounded by the capacity, so that decoding
			// reallocates O(log n) times, not per token.
			c := min(max(need, 2*cap(m.lat)/max(ckv, 1), 64), s.cap)
			lat := make([]float32, len(m.lat), c*ckv)
			copy(lat, m.lat)
			kr := make([]float32, len(m.kr), c*r)
			copy(kr, m.kr)
			m.lat, m.kr = lat, kr
		}
	}
	return nil
}

// Config returns the configuration the state is shaped for.
func (s *State) Config() *Config { return s.cfg }

// Recurrent returns the state's fixed-size arrays in the order snapshots
// store them: for every KDA layer in order, its recurrent state S
// ([heads][D][D]) and its q, k and v short-conv histories. The slices
// alias the state: a snapshot reads them, a restore fills them. In a
// cluster the state must be home (Model.Home) or just Reset, and hold
// every head (NewState; Model.EachRecurrent reads and fills any state).
func (s *State) Recurrent() [][]float32 {
	if s.away || s.partial() {
		panic("model: Recurrent of a state whose KDA heads are on other ranks (Model.Home or Model.EachRecurrent)")
	}
	var out [][]float32
	for l := range s.kda {
		if s.cfg.IsMLA(l) {
			continue
		}
		k := &s.kda[l]
		out = append(out, k.S, k.qh, k.kh, k.vh)
	}
	return out
}

// Cached returns the MLA cache rows of positions [from, to) of every MLA
// layer in order: each layer's normalised latents ([n][KVLoraRank]) then
// its rope keys ([n][QKRopeDim]). The slices alias the state. They are
// append-only: once written, a position's rows never change.
func (s *State) Cached(from, to int) [][]float32 {
	if from < 0 || to > s.pos || from > to {
		panic(fmt.Sprintf("model: cached rows [%d, %d) of a state of %d positions", from, to, s.pos))
	}
	ckv, r := s.cfg.KVLoraRank, s.cfg.QKRopeDim
	var out [][]float32
	for l := range s.mla {
		if !s.cfg.IsMLA(l) {
			continue
		}
		m := &s.mla[l]
		out = append(out, m.lat[from*ckv:to*ckv], m.kr[from*r:to*r])
	}
	return out
}

// Extend appends n positions to the sequence without computing them, for
// restoring a saved state or a cached prefix: the MLA cache grows by n
// rows, returned as Cached(Len()-n, Len()) for the caller to fill, and Len
// grows by n. The recurrent arrays (Recurrent) must be filled to match the
// new length. It ends a speculation in progress, and fails with
// ErrContextFull beyond the capacity.
func (s *State) Extend(n int) ([][]float32, error) {
	if n < 0 {
		return nil, fmt.Errorf("model: extending a state by %d positions", n)
	}
	if err := s.reserve(n); err != nil {
		return nil, err
	}
	ckv, r := s.cfg.KVLoraRank, s.cfg.QKRopeDim
	need := s.pos + n
	for l := range s.mla {
		if !s.cfg.IsMLA(l) {
			continue
		}
		m := &s.mla[l]
		m.lat, m.kr = m.lat[:need*ckv], m.kr[:need*r]
	}
	s.endSpec()
	from := s.pos
	s.pos = need
	return s.Cached(from, need), nil
}
