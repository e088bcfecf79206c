// Package statefile is the format of a saved session: a sequence's model
// state (model.State), the tokens it consumed and those chosen but not yet
// fed, behind a header that names the model's configuration and checkpoint,
// with a CRC-32C over everything. Save writes one; Load checks every field
// before it trusts it and never allocates from the file's numbers beyond
// what the state's capacity allows.
package statefile

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"strings"

	"github.com/k3go/k3/model"
)

// ErrBadState reports a saved session state that is truncated, corrupt, or
// belongs to a model with another configuration or checkpoint.
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

// Recurrent streams a state's recurrent arrays, whole, in
// model.State.Recurrent's order: it calls fn with each, for Save to write
// or Load to fill (model.Model.EachRecurrent, for a state whose heads are
// on a cluster's ranks); nil uses the state's own arrays.
type Recurrent func(fn func(v []float32) error) error

// own is the Recurrent of a state's own arrays.
func own(s *model.State) Recurrent {
	return func(fn func(v []float32) error) error {
		for _, v := range s.Recurrent() {
			if err := fn(v); err != nil {
				return err
			}
		}
		return nil
	}
}

// Save writes the state s, the tokens it consumed (len(tokens) must equal
// s.Len()) and pending tokens chosen but not yet fed (for instance the last
// generated token), which a restored session feeds first. checkpoint is
// the checkpoint's content fingerprint (model.Plan.Fingerprint): Load
// refuses a file saved with another checkpoint, even of the same
// configuration.
func Save(w io.Writer, s *model.State, checkpoint string, tokens, pending []int, rec Recurrent) error {
	if len(tokens) != s.Len() {
		return fmt.Errorf("state holds %d positions but %d tokens were given", s.Len(), len(tokens))
	}
	cfg := s.Config()
	h := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(io.MultiWriter(w, h), 1<<20)
	put := func(v any) { binary.Write(bw, binary.LittleEndian, v) }
	bw.WriteString(stateMagic)
	put(uint32(stateVersion))
	put(cfg.Fingerprint())
	var ck [stateCkptBytes]byte
	copy(ck[:], checkpoint)
	bw.Write(ck[:])
	put(int64(s.Len()))
	put(int64(len(pending)))
	for _, t := range tokens {
		put(int32(t))
	}
	for _, t := range pending {
		put(int32(t))
	}
	if rec == nil {
		rec = own(s)
	}
	if err := rec(func(v []float32) error { writeFloats(bw, v); return nil }); err != nil {
		return err
	}
	for _, v := range s.Cached(0, s.Len()) {
		writeFloats(bw, v)
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

// Size returns the exact size of a saved state of n positions and p
// pending tokens.
func Size(c *model.Config, n, p int) int64 {
	fixed, perPos := model.StateBytes(c)
	return stateHeaderBytes + 4*int64(n+p) + fixed + perPos*int64(n) + 4
}

// stateHeaderBytes is the header's size: magic, version, config and
// checkpoint fingerprints, position and pending counts.
const stateHeaderBytes = int64(len(stateMagic)) + 4 + 8 + stateCkptBytes + 8 + 8

// maxPending bounds the pending tokens of a state file.
const maxPending = 1 << 20

// Load replaces the state s with one saved by Save and returns its tokens.
// It checks the magic, version, config fingerprint, the checkpoint
// fingerprint against checkpoint, the position count against the state's
// capacity, the exact size (when size >= 0) and the checksum, before and
// while reading; nothing is allocated from the file's numbers beyond what
// the capacity allows. rec, if not nil, takes the recurrent arrays (a
// cluster's state: they are dealt out to the ranks as they are read). On
// error the state is reset.
func Load(r io.Reader, size int64, s *model.State, checkpoint string, rec Recurrent) (tokens, pending []int, err error) {
	cfg := s.Config()
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
	if fp != cfg.Fingerprint() {
		return nil, nil, errors.New("saved with a model of another configuration")
	}
	var want [stateCkptBytes]byte
	copy(want[:], checkpoint)
	if ck != want {
		return nil, nil, fmt.Errorf("saved with another checkpoint of the same configuration (content fingerprint %q, this one is %q): its state would not match these weights",
			strings.TrimRight(string(ck[:]), "\x00"), checkpoint)
	}
	if n < 0 || n > int64(s.Cap()) {
		return nil, nil, fmt.Errorf("%d positions, the session holds at most %d", n, s.Cap())
	}
	if np < 0 || np > maxPending {
		return nil, nil, fmt.Errorf("%d pending tokens", np)
	}
	total := Size(cfg, int(n), int(np))
	if size >= 0 && size != total {
		return nil, nil, fmt.Errorf("file is %d bytes, a state of %d positions and %d pending tokens is %d", size, n, np, total)
	}
	br := bufio.NewReaderSize(io.LimitReader(r, total-stateHeaderBytes), 1<<20)
	in = io.TeeReader(br, h)
	s.Reset()
	cached, err := s.Extend(int(n))
	if err != nil {
		return nil, nil, err
	}
	all := make([]int, n+np)
	for i := range all {
		var t int32
		if err := readAll(in, &t); err != nil {
			return nil, nil, err
		}
		if t < 0 || int(t) >= cfg.Vocab {
			return nil, nil, fmt.Errorf("token %d at index %d is outside the vocabulary", t, i)
		}
		all[i] = int(t)
	}
	tokens, pending = all[:n:n], all[n:]
	if rec == nil {
		rec = own(s)
	}
	i := 0
	if err := rec(func(v []float32) error {
		if err := readFloats(in, v); err != nil {
			return fmt.Errorf("KDA layer array %d: %v", i, err)
		}
		i++
		return nil
	}); err != nil {
		return nil, nil, err
	}
	for i, v := range cached {
		if err := readFloats(in, v); err != nil {
			return nil, nil, fmt.Errorf("MLA layer array %d: %v", i, err)
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
