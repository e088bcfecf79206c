// Package cluster runs one model over several processes (ranks), each
// reading its rows of every weight matrix from its own disk (issue 32):
// rank 0, the process that serves requests, holds every sequence's MLA
// cache and computes everything but the products of weight matrices and
// the KDA heads; every rank computes whole dot products for its rows of
// each product, and the rows are placed side by side on rank 0, never
// summed, so that the logits are the same bits at every rank count
// (model.Plan.Shard, model.Round). Every rank also keeps its KDA heads of
// each sequence's state and runs them (model.RoundKDA); states move
// between rank 0 and the workers only when one needs them whole
// (model.Model.Home).
//
// Client is rank 0's side: a model.Ranks that sends each round to every
// worker over its link.Conn, computes rank 0's rows meanwhile, and places
// the workers' rows as they come. Worker is the other side: it loads its
// rank's slice of the checkpoint when rank 0 says which rank it is, and
// answers rounds with its rows. Messages are encoded here (a round's
// products and inputs, a worker's rows, an error); link carries them as
// checked frames.
package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/k3go/k3/model"
)

// Message kinds on a rank-0-to-worker connection.
const (
	kindRound        uint8 = 1 + iota // rank 0 → worker: a round's products and inputs
	kindSlices                        // worker → rank 0: its rows of every product
	kindError                         // worker → rank 0: the round failed there (text)
	kindReady                         // worker → rank 0: its rank's slice is loaded
	kindPing                          // rank 0 → worker: are you there (health)
	kindPong                          // worker → rank 0
	kindPrefetch                      // rank 0 → worker: start reading these experts' halves (no reply)
	kindPutState                      // rank 0 → worker: its KDA heads of a state (no reply)
	kindGetState                      // rank 0 → worker: send your KDA heads of a state
	kindState                         // worker → rank 0: its KDA heads of a state
	kindForget                        // rank 0 → worker: these states are gone (no reply)
	kindSaveHeads                     // rank 0 → worker: file your heads of a state under a prefix-cache key (no reply)
	kindRestoreHeads                  // rank 0 → worker: fill your heads of a state from a prefix-cache entry
	kindRestored                      // worker → rank 0: it did
	kindRollback                      // rank 0 → worker: keep the first rows of a state's speculation (no reply)
)

// A product's flags.
const (
	flagF64 = 1 << iota // model.Product.F64
	flagGLU             // model.Product.GLU
)

// Format numbers the rounds' encoding and meaning (which products a round
// of each kind may hold). Ranks state it with their k3 version at the
// handshake (HelloVersion), so that ranks that would read one round two
// ways refuse each other there. 2: an expert round may carry products of
// layer matrices (model.Product.Layer), a product may be a GLU pair
// (model.Product.GLU) and pick its input rows (model.Product.Pick). 3:
// the KDA layers split by heads (model.RoundKDA, its sequences, the
// states' messages; a product's Unit), and the ranks hold the KDA
// matrices' rows in whole heads (model.SplitUnit). 4: every rank keeps its
// heads of rank 0's prefix-cache entries (kindSaveHeads,
// kindRestoreHeads), and speculates on its own heads (a sequence's spec
// and at, kindRollback).
const Format = 4

// HelloVersion is the version a rank of k3 version states at the
// handshake: the version and the rounds' Format.
func HelloVersion(version string) string { return fmt.Sprintf("%s+rounds.%d", version, Format) }

// ErrMessage reports a message that does not decode: a frame whose bytes
// are well formed but whose contents are not a valid round or reply.
var ErrMessage = errors.New("malformed cluster message")

// Limits a decoded round must keep: a hostile or corrupt message is an
// error, never an allocation of what it claims.
const (
	maxOutputRatio = 64
	maxInputs      = 1 << 16
	maxProducts    = 1 << 16
	maxRows        = 1 << 26 // rows of one matrix (the head's vocabulary is 163,840)
	maxSeqs        = 1 << 16
)

// round header: layer int32, kind u8, 3 pad, inputs u32, products u32,
// sequences u32; then per input its length in floats (u32); then per
// product: mat u8, w u8, flags u8 (flagF64, flagGLU), layer u8, expert
// i32, in u32, n u32, rows u32, picks u32 (0, or n: model.Product.Pick),
// unit u32; then every product's picks (i32 each), in product order; then
// per sequence (model.RoundSeq): id u64, lo u32, n u32, fresh u32, spec
// u32, at u32; then
// the inputs' floats, little-endian. Every part is a multiple of 4 bytes,
// so the floats of a message received into an aligned buffer are aligned.
const (
	roundHeader = 20
	productSize = 28
	seqSize     = 28
)

// encodeRound writes rd's header and tables into hdr (reused) and returns
// it; the inputs follow as their own parts of the frame, sent as they lie
// in memory (floatBytes).
func encodeRound(hdr []byte, rd *model.Round) []byte {
	hdr = hdr[:0]
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(int32(rd.Layer)))
	hdr = append(hdr, byte(rd.Kind), 0, 0, 0)
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(rd.Inputs)))
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(rd.Products)))
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(rd.Seqs)))
	for _, in := range rd.Inputs {
		hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(in)))
	}
	for i := range rd.Products {
		pr := &rd.Products[i]
		flags := byte(0)
		if pr.F64 {
			flags |= flagF64
		}
		if pr.GLU {
			flags |= flagGLU
		}
		layer := byte(0)
		if pr.Layer {
			layer = 1
		}
		hdr = append(hdr, byte(pr.Mat), pr.W, flags, layer)
		hdr = binary.LittleEndian.AppendUint32(hdr, uint32(pr.Expert))
		hdr = binary.LittleEndian.AppendUint32(hdr, uint32(pr.In))
		hdr = binary.LittleEndian.AppendUint32(hdr, uint32(pr.N))
		hdr = binary.LittleEndian.AppendUint32(hdr, uint32(pr.Rows))
		hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(pr.Pick)))
		hdr = binary.LittleEndian.AppendUint32(hdr, uint32(pr.Unit))
	}
	for i := range rd.Products {
		for _, r := range rd.Products[i].Pick {
			hdr = binary.LittleEndian.AppendUint32(hdr, uint32(r))
		}
	}
	for _, rs := range rd.Seqs {
		fresh := uint32(0)
		if rs.Fresh {
			fresh = 1
		}
		hdr = binary.LittleEndian.AppendUint64(hdr, rs.ID)
		hdr = binary.LittleEndian.AppendUint32(hdr, uint32(rs.Lo))
		hdr = binary.LittleEndian.AppendUint32(hdr, uint32(rs.N))
		hdr = binary.LittleEndian.AppendUint32(hdr, fresh)
		hdr = binary.LittleEndian.AppendUint32(hdr, uint32(rs.Spec))
		hdr = binary.LittleEndian.AppendUint32(hdr, uint32(rs.At))
	}
	return hdr
}

// floatBytes views floats as their bytes (little-endian machines only:
// the cluster refuses to start elsewhere, see littleEndian).
func floatBytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4*len(f))
}

// bytesFloats views b (4-byte aligned, a multiple of 4 long) as floats.
func bytesFloats(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// bytesInt32s views b (4-byte aligned, a multiple of 4 long) as int32s.
func bytesInt32s(b []byte) []int32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// littleEndian reports whether the machine stores floats as the wire
// does; the encoding sends them as they lie in memory.
func littleEndian() bool {
	x := uint32(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}

// decodeRound decodes a round message into rd, reusing its slices; the
// inputs alias msg, which must be 4-byte aligned and stay unchanged while
// rd is used. Every count and size is checked against the message's own
// length and the products against the inputs, so that computing the
// round allocates at most a bounded multiple of the message.
func decodeRound(msg []byte, rd *model.Round) error {
	if len(msg) < roundHeader {
		return fmt.Errorf("%w: a round of %d bytes", ErrMessage, len(msg))
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(msg)))%4 != 0 {
		return fmt.Errorf("%w: a round at an unaligned address", ErrMessage)
	}
	le := binary.LittleEndian
	layer := int(int32(le.Uint32(msg)))
	kind := model.RoundKind(msg[4])
	nIn, nPr, nSeq := le.Uint32(msg[8:]), le.Uint32(msg[12:]), le.Uint32(msg[16:])
	if kind >= model.NumRoundKinds || msg[5]|msg[6]|msg[7] != 0 {
		return fmt.Errorf("%w: round kind %d (header %x)", ErrMessage, kind, msg[4:8])
	}
	if nIn > maxInputs || nPr > maxProducts || nSeq > maxSeqs {
		return fmt.Errorf("%w: %d inputs, %d products, %d sequences", ErrMessage, nIn, nPr, nSeq)
	}
	tables := roundHeader + 4*int(nIn) + productSize*int(nPr)
	if len(msg) < tables {
		return fmt.Errorf("%w: a round of %d bytes cannot hold its %d inputs' and %d products' tables", ErrMessage, len(msg), nIn, nPr)
	}
	rd.Layer, rd.Kind = layer, kind
	rd.Inputs, rd.Products, rd.Seqs = rd.Inputs[:0], rd.Products[:0], rd.Seqs[:0]
	// The picks' section: its length from the product table, checked
	// against the message before anything is read from it.
	p := roundHeader + 4*int(nIn)
	picks := 0
	for i := 0; i < int(nPr); i++ {
		n := le.Uint32(msg[p+productSize*i+20:])
		if int64(n) > int64(len(msg)-tables)/4-int64(picks) {
			return fmt.Errorf("%w: product %d picks %d rows, more than the message holds", ErrMessage, i, n)
		}
		picks += int(n)
	}
	seqs := tables + 4*picks
	if int64(nSeq)*seqSize > int64(len(msg)-seqs) {
		return fmt.Errorf("%w: %d sequences overrun the message", ErrMessage, nSeq)
	}
	for i := 0; i < int(nSeq); i++ {
		b := msg[seqs+seqSize*i:]
		rs := model.RoundSeq{ID: le.Uint64(b), Lo: int(le.Uint32(b[8:])), N: int(le.Uint32(b[12:])), Fresh: le.Uint32(b[16:]) == 1,
			Spec: int(le.Uint32(b[20:])), At: int(le.Uint32(b[24:]))}
		if le.Uint32(b[16:]) > 1 || rs.Lo > maxRows || rs.N > maxRows || rs.Spec > maxRows || rs.At > maxRows ||
			(rs.Spec == 0 && rs.At != 0) || (rs.Spec > 0 && rs.At+rs.N > rs.Spec) {
			return fmt.Errorf("%w: sequence %d (rows %d+%d, fresh %d, rows %d+%d of a speculation of %d)", ErrMessage, i, rs.Lo, rs.N, le.Uint32(b[16:]), rs.At, rs.N, rs.Spec)
		}
		rd.Seqs = append(rd.Seqs, rs)
	}
	off := seqs + seqSize*int(nSeq)
	for i := 0; i < int(nIn); i++ {
		n := int(le.Uint32(msg[roundHeader+4*i:]))
		if n > (len(msg)-off)/4 {
			return fmt.Errorf("%w: input %d of %d floats overruns the message", ErrMessage, i, n)
		}
		rd.Inputs = append(rd.Inputs, bytesFloats(msg[off:off+4*n]))
		off += 4 * n
	}
	if off != len(msg) {
		return fmt.Errorf("%w: %d bytes after the inputs", ErrMessage, len(msg)-off)
	}
	var out int64
	pick := tables
	for i := 0; i < int(nPr); i++ {
		b := msg[p+productSize*i:]
		pr := model.Product{Mat: model.MatID(b[0]), W: b[1], F64: b[2]&flagF64 != 0, GLU: b[2]&flagGLU != 0, Layer: b[3] == 1,
			Expert: int32(le.Uint32(b[4:])), In: int(le.Uint32(b[8:])), N: int(le.Uint32(b[12:])), Rows: int(le.Uint32(b[16:])),
			Unit: int(le.Uint32(b[24:]))}
		if b[2]&^(flagF64|flagGLU) != 0 || b[3] > 1 || pr.In < 0 || pr.In >= len(rd.Inputs) || pr.Rows <= 0 || pr.Rows > maxRows || pr.Expert < 0 ||
			pr.Unit < 0 || pr.Unit > pr.Rows || (pr.Unit > 1 && pr.Rows%pr.Unit != 0) {
			return fmt.Errorf("%w: product %d (matrix %d, expert %d, input %d, %d rows in units of %d)", ErrMessage, i, pr.Mat, pr.Expert, pr.In, pr.Rows, pr.Unit)
		}
		// Every input row has at least one column.
		if pr.N <= 0 || pr.N > len(rd.Inputs[pr.In]) {
			return fmt.Errorf("%w: product %d over %d rows of an input of %d floats", ErrMessage, i, pr.N, len(rd.Inputs[pr.In]))
		}
		if n := int(le.Uint32(b[20:])); n > 0 {
			// A pick names a row of the input; the row's width is the
			// matrix's, checked when the product runs (model.Slices).
			if n != pr.N {
				return fmt.Errorf("%w: product %d over %d rows picks %d", ErrMessage, i, pr.N, n)
			}
			pr.Pick = bytesInt32s(msg[pick : pick+4*n])
			for _, r := range pr.Pick {
				if r < 0 || int(r) >= len(rd.Inputs[pr.In]) {
					return fmt.Errorf("%w: product %d picks row %d of an input of %d floats", ErrMessage, i, r, len(rd.Inputs[pr.In]))
				}
			}
			pick += 4 * n
		}
		out += int64(pr.N) * int64(pr.Rows)
		rd.Products = append(rd.Products, pr)
	}
	// A worker's rows of the products are bounded by a multiple of what
	// the message carried (the head has the most output per input: 163,840
	// vocabulary rows per 7,168 hidden floats, split over at least two
	// ranks), or refused.
	if out > maxOutputRatio*int64(len(msg)/4)+1<<20 || out > math.MaxInt32 {
		return fmt.Errorf("%w: the products' outputs would hold %d floats for a message of %d bytes", ErrMessage, out, len(msg))
	}
	return nil
}

// sliceFloats returns how many floats rank's rows of every product of rd
// take.
func sliceFloats(rd *model.Round, rank, ranks int) int {
	n := 0
	for i := range rd.Products {
		lo, hi := model.SliceRows(&rd.Products[i], rank, ranks)
		n += rd.Products[i].N * (hi - lo)
	}
	return n
}

// placeReply checks a worker's reply against the rows rank must have sent
// and places them in rd's outputs. slices is reused.
func placeReply(rd *model.Round, rank, ranks int, msg []byte, slices [][]float32) ([][]float32, error) {
	if want := sliceFloats(rd, rank, ranks); len(msg) != 4*want {
		return slices, fmt.Errorf("%w: a reply of %d bytes, want %d floats of rows", ErrMessage, len(msg), want)
	}
	all := bytesFloats(msg)
	slices = slices[:0]
	off := 0
	for i := range rd.Products {
		lo, hi := model.SliceRows(&rd.Products[i], rank, ranks)
		n := rd.Products[i].N * (hi - lo)
		slices = append(slices, all[off:off+n])
		off += n
	}
	model.Place(rd, rank, ranks, slices)
	return slices, nil
}

// A prefetch message: layer int32, half u8, 3 pad, then the experts'
// ids (int32 each).
const prefetchHeader = 8

// encodePrefetch writes a prefetch message into dst (reused).
func encodePrefetch(dst []byte, layer, half int, experts []int32) []byte {
	dst = dst[:0]
	dst = binary.LittleEndian.AppendUint32(dst, uint32(int32(layer)))
	dst = append(dst, byte(half), 0, 0, 0)
	for _, e := range experts {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(e))
	}
	return dst
}

// decodePrefetch decodes a prefetch message into ids (reused).
func decodePrefetch(msg []byte, ids []int32) (layer, half int, _ []int32, _ error) {
	if len(msg) < prefetchHeader || (len(msg)-prefetchHeader)%4 != 0 || msg[4] > 1 || msg[5]|msg[6]|msg[7] != 0 {
		return 0, 0, ids, fmt.Errorf("%w: a prefetch of %d bytes", ErrMessage, len(msg))
	}
	layer, half = int(int32(binary.LittleEndian.Uint32(msg))), int(msg[4])
	ids = ids[:0]
	for b := msg[prefetchHeader:]; len(b) > 0; b = b[4:] {
		e := int32(binary.LittleEndian.Uint32(b))
		if e < 0 {
			return 0, 0, ids, fmt.Errorf("%w: a prefetch of expert %d", ErrMessage, e)
		}
		ids = append(ids, e)
	}
	return layer, half, ids, nil
}

// Traffic returns what a Client's Stats count for rounds r in a cluster of
// ranks ranks: sent, every round's header, tables and inputs to each
// worker; received, each worker's rows of every product. The links' frame
// headers (a few dozen bytes a message) and TCP's are not counted, as
// Stats does not count them.
func Traffic(ranks int, r model.PassRounds) (sent, received int64) {
	if ranks < 2 {
		return 0, 0
	}
	workers := int64(ranks - 1)
	tables := float64(roundHeader*r.Rounds) + 4*r.Inputs + productSize*r.Products + float64(seqSize*r.Seqs)
	sent = workers * (int64(math.Round(tables)) + 4*r.InputFloats)
	for rows, n := range r.Out {
		_, hi := model.RowRange(rows, 0, ranks) // rank 0's rows are [0, hi)
		received += 4 * n * int64(rows-hi)
	}
	if r.HeadRows > 0 {
		_, hi := model.UnitRange(r.HeadWidth, r.HeadDim, 0, ranks)
		received += 4 * r.HeadRows * int64(r.HeadWidth-hi)
	}
	return sent, received
}

// A state message (kindPutState, kindGetState): the state's id u64, the
// first part (model.HeadParts' order) u32, and for a request the number
// of parts u32 (0 in a put); a put's floats follow (the parts, end to
// end). A forget message is ids, u64 each.
const stateHeader = 16

// encodeStateHeader writes a state message's header into dst (reused).
func encodeStateHeader(dst []byte, id uint64, from, n int) []byte {
	dst = binary.LittleEndian.AppendUint64(dst[:0], id)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(from))
	return binary.LittleEndian.AppendUint32(dst, uint32(n))
}

// A rollback message: the state's id u64, the rows kept u32, 4 pad.
const rollbackSize = 16

// encodeRollback writes a rollback message into dst (reused).
func encodeRollback(dst []byte, id uint64, keep int) []byte {
	dst = binary.LittleEndian.AppendUint64(dst[:0], id)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(keep))
	return append(dst, 0, 0, 0, 0)
}

// decodeRollback decodes a rollback message.
func decodeRollback(msg []byte) (id uint64, keep int, err error) {
	if len(msg) != rollbackSize || binary.LittleEndian.Uint32(msg[12:]) != 0 || binary.LittleEndian.Uint32(msg[8:]) > maxRows {
		return 0, 0, fmt.Errorf("%w: a rollback message of %d bytes", ErrMessage, len(msg))
	}
	return binary.LittleEndian.Uint64(msg), int(binary.LittleEndian.Uint32(msg[8:])), nil
}

// decodeStateID decodes the header a state message begins with and
// returns the rest.
func decodeStateID(msg []byte) (id uint64, from, n int, rest []byte, err error) {
	if len(msg) < stateHeader || len(msg)%4 != 0 {
		return 0, 0, 0, nil, fmt.Errorf("%w: a state message of %d bytes", ErrMessage, len(msg))
	}
	f, c := binary.LittleEndian.Uint32(msg[8:]), binary.LittleEndian.Uint32(msg[12:])
	if f > maxProducts || c > maxProducts {
		return 0, 0, 0, nil, fmt.Errorf("%w: a state message of parts [%d, +%d)", ErrMessage, f, c)
	}
	return binary.LittleEndian.Uint64(msg), int(f), int(c), msg[stateHeader:], nil
}

// HeadEntry names a prefix-cache state entry whose KDA heads every rank
// keeps its own slice of: rank 0's key, and what a worker's store files
// its slice with (the entry's position, tail, anchor and block size, and
// the reads a hit saves, which rank its slice against the others for
// eviction).
type HeadEntry struct {
	Key, Anchor      [32]byte
	Pos, Tail, Block int
	Saves            int64
}

// A head-entry message (kindSaveHeads, kindRestoreHeads): the state's id
// u64, the key and the anchor (32 bytes each), pos, tail and block (u32
// each), 4 pad, saves (i64).
const headEntrySize = 96

// encodeHeadEntry writes a head-entry message into dst (reused).
func encodeHeadEntry(dst []byte, id uint64, e *HeadEntry) []byte {
	dst = binary.LittleEndian.AppendUint64(dst[:0], id)
	dst = append(append(dst, e.Key[:]...), e.Anchor[:]...)
	for _, v := range []int{e.Pos, e.Tail, e.Block, 0} {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(v))
	}
	return binary.LittleEndian.AppendUint64(dst, uint64(e.Saves))
}

// decodeHeadEntry decodes a head-entry message. The numbers are checked
// only for their range here; the store that files the entry checks them
// against each other.
func decodeHeadEntry(msg []byte) (id uint64, e HeadEntry, err error) {
	if len(msg) != headEntrySize {
		return 0, e, fmt.Errorf("%w: a prefix-cache entry message of %d bytes", ErrMessage, len(msg))
	}
	id = binary.LittleEndian.Uint64(msg)
	copy(e.Key[:], msg[8:40])
	copy(e.Anchor[:], msg[40:72])
	u := func(i int) uint32 { return binary.LittleEndian.Uint32(msg[72+4*i:]) }
	if u(0) > math.MaxInt32 || u(1) > math.MaxInt32 || u(2) > math.MaxInt32 || u(3) != 0 {
		return 0, HeadEntry{}, fmt.Errorf("%w: a prefix-cache entry at %d (tail %d, block %d)", ErrMessage, u(0), u(1), u(2))
	}
	e.Pos, e.Tail, e.Block = int(u(0)), int(u(1)), int(u(2))
	e.Saves = int64(binary.LittleEndian.Uint64(msg[88:]))
	return id, e, nil
}
