package model

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"strings"
)

// ErrBadState reports a saved session state that is truncated, corrupt, or
// belongs to a model with another configuration.
var ErrBadState = errors.New("bad saved state")

// The state file: a header, the tokens, then every KDA layer's recurrent
// state and conv histories and every MLA layer's cached positions, all
// little-endian, followed by a CRC-32C of everything before it.
//
// Version 2 adds, after the config fingerprint, the checkpoint's content
// fingerprint (State.Checkpoint) in a fixed field of stateCkptBytes.
const (
	stateMagic     = "K3SESS\x00\x01"
	stateVersion   = 2
	stateCkptBytes = 32
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Fingerprint is a hash of every config value that shapes the state, so a
// state saved with one model is refused by another.
func (c *Config) Fingerprint() uint64 {
	h := crc32.New(castagnoli)
	w := func(vs ...int) {
		for _, v := range vs {
			binary.Write(h, binary.LittleEndian, int64(v))
		}
	}
	w(c.Hidden, c.Layers, c.Vocab, c.KDAHeads, c.KDAHeadDim, c.ConvKernel, c.MLAHeads, c.QLoraRank, c.KVLoraRank,
		c.QKNopeDim, c.QKRopeDim, c.VHeadDim, c.Experts, c.TopK, c.SharedExperts, c.LatentDim, c.MoEIntermediate,
		c.FirstKDense, c.DenseIntermediate, c.AttnResBlock)
	w(c.FullAttnLayers...)
	lo := uint64(h.Sum32())
	binary.Write(h, binary.LittleEndian, math.Float32bits(c.RMSNormEps))
	return lo<<32 | uint64(h.Sum32())
}

// Save writes the state, the tokens it consumed (len(tokens) must equal
// Len()) and pending tokens chosen but not yet fed (for instance the last
// generated token), which a restored session feeds first.
func (s *State) Save(w io.Writer, tokens, pending []int) error {
	if len(tokens) != s.pos {
		return fmt.Errorf("state holds %d positions but %d tokens were given", s.pos, len(tokens))
	}
	h := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(io.MultiWriter(w, h), 1<<20)
	put := func(v any) { binary.Write(bw, binary.LittleEndian, v) }
	bw.WriteString(stateMagic)
	put(uint32(stateVersion))
	put(s.cfg.Fingerprint())
	var ck [stateCkptBytes]byte
	copy(ck[:], s.Checkpoint)
	bw.Write(ck[:])
	put(int64(s.pos))
	put(int64(len(pending)))
	for _, t := range tokens {
		put(int32(t))
	}
	for _, t := range pending {
		put(int32(t))
	}
	for l := range s.kda {
		if s.cfg.IsMLA(l) {
			continue
		}
		k := &s.kda[l]
		writeFloats(bw, k.S)
		writeFloats(bw, k.qh)
		writeFloats(bw, k.kh)
		writeFloats(bw, k.vh)
	}
	ckv, r := s.cfg.KVLoraRank, s.cfg.QKRopeDim
	for l := range s.mla {
		if !s.cfg.IsMLA(l) {
			continue
		}
		writeFloats(bw, s.mla[l].lat[:s.pos*ckv])
		writeFloats(bw, s.mla[l].kr[:s.pos*r])
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return binary.Write(w, binary.LittleEndian, h.Sum32())
}

func writeFloats(w io.Writer, v []float32) {
	var buf [4096]byte
	for len(v) > 0 {
		n := min(len(v), len(buf)/4)
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v[i]))
		}
		w.Write(buf[:4*n])
		v = v[n:]
	}
}

// StateFileSize returns the exact size of a saved state of n positions
// and p pending tokens.
func StateFileSize(c *Config, n, p int) int64 {
	fixed, perPos := StateBytes(c)
	return stateHeaderBytes + 4*int64(n+p) + fixed + perPos*int64(n) + 4
}

// stateHeaderBytes is the header's size: magic, version, config and
// checkpoint fingerprints, position and pending counts.
const stateHeaderBytes = int64(len(stateMagic)) + 4 + 8 + stateCkptBytes + 8 + 8

// maxPending bounds the pending tokens of a state file.
const maxPending = 1 << 20

// Load replaces the state with one saved by Save and returns its tokens.
// It checks the magic, version, config fingerprint, the position count
// against the state's capacity, the exact size (when size >= 0) and the
// checksum, before and while reading; nothing is allocated from the file's
// numbers beyond what the capacity allows. On error the state is reset.
func (s *State) Load(r io.Reader, size int64) (tokens, pending []int, err error) {
	defer func() {
		if err != nil {
			s.Reset()
			err = fmt.Errorf("%w: %v", ErrBadState, err)
		}
	}()
	// The header is read unbuffered and the rest through a reader bounded
	// by the length the header declares, so that Load never consumes a
	// byte of r past the state's end (a stream may hold more).
	h := crc32.New(castagnoli)
	in := io.TeeReader(r, h) // hashes exactly the bytes consumed
	magic := make([]byte, len(stateMagic))
	if _, err := io.ReadFull(in, magic); err != nil {
		return nil, nil, fmt.Errorf("reading header: %v", err)
	}
	if string(magic) != stateMagic {
		return nil, nil, errors.New("not a k3 session state file")
	}
	var version uint32
	var fp uint64
	var ck [stateCkptBytes]byte
	var n, np int64
	if err := readAll(in, &version); err != nil {
		return nil, nil, err
	}
	if version != stateVersion {
		return nil, nil, fmt.Errorf("version %d, this build reads %d", version, stateVersion)
	}
	if err := readAll(in, &fp, &ck, &n, &np); err != nil {
		return nil, nil, err
	}
	if fp != s.cfg.Fingerprint() {
		return nil, nil, errors.New("saved with a model of another configuration")
	}
	var want [stateCkptBytes]byte
	copy(want[:], s.Checkpoint)
	if ck != want {
		return nil, nil, fmt.Errorf("saved with another checkpoint of the same configuration (content fingerprint %q, this one is %q): its state would not match these weights",
			strings.TrimRight(string(ck[:]), "\x00"), s.Checkpoint)
	}
	if n < 0 || n > int64(s.cap) {
		return nil, nil, fmt.Errorf("%d positions, the session holds at most %d", n, s.cap)
	}
	if np < 0 || np > maxPending {
		return nil, nil, fmt.Errorf("%d pending tokens", np)
	}
	total := StateFileSize(s.cfg, int(n), int(np))
	if size >= 0 && size != total {
		return nil, nil, fmt.Errorf("file is %d bytes, a state of %d positions and %d pending tokens is %d", size, n, np, total)
	}
	br := bufio.NewReaderSize(io.LimitReader(r, total-stateHeaderBytes), 1<<20)
	in = io.TeeReader(br, h)
	s.Reset()
	if err := s.reserve(int(n)); err != nil {
		return nil, nil, err
	}
	all := make([]int, n+np)
	for i := range all {
		var t int32
		if err := readAll(in, &t); err != nil {
			return nil, nil, err
		}
		if t < 0 || int(t) >= s.cfg.Vocab {
			return nil, nil, fmt.Errorf("token %d at index %d is outside the vocabulary", t, i)
		}
		all[i] = int(t)
	}
	tokens, pending = all[:n:n], all[n:]
	for l := range s.kda {
		if s.cfg.IsMLA(l) {
			continue
		}
		k := &s.kda[l]
		for _, v := range [][]float32{k.S, k.qh, k.kh, k.vh} {
			if err := readFloats(in, v); err != nil {
				return nil, nil, fmt.Errorf("KDA layer %d: %v", l, err)
			}
		}
	}
	ckv, rr := s.cfg.KVLoraRank, s.cfg.QKRopeDim
	for l := range s.mla {
		if !s.cfg.IsMLA(l) {
			continue
		}
		m := &s.mla[l]
		m.lat, m.kr = m.lat[:int(n)*ckv], m.kr[:int(n)*rr]
		if err := readFloats(in, m.lat); err != nil {
			return nil, nil, fmt.Errorf("MLA layer %d: %v", l, err)
		}
		if err := readFloats(in, m.kr); err != nil {
			return nil, nil, fmt.Errorf("MLA layer %d: %v", l, err)
		}
	}
	sum := h.Sum32()
	var stored uint32
	if err := binary.Read(br, binary.LittleEndian, &stored); err != nil {
		return nil, nil, fmt.Errorf("reading checksum: %v", err)
	}
	if stored != sum {
		return nil, nil, errors.New("checksum mismatch: the file is corrupt")
	}
	s.pos = int(n)
	return tokens, pending, nil
}

func readAll(r io.Reader, vs ...any) error {
	for _, v := range vs {
		if err := binary.Read(r, binary.LittleEndian, v); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("truncated: %v", err)
		}
	}
	return nil
}

func readFloats(r io.Reader, v []float32) error {
	var buf [4096]byte
	for len(v) > 0 {
		n := min(len(v), len(buf)/4)
		if _, err := io.ReadFull(r, buf[:4*n]); err != nil {
			return fmt.Errorf("truncated: %v", err)
		}
		for i := 0; i < n; i++ {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
		}
		v = v[n:]
	}
	return nil
}
