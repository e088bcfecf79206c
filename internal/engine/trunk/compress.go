package trunk

import (
	"encoding/binary"
	"errors"
	"hash/crc32"

	"github.com/k3go/k3/internal/platform/kernel/bf16merge"
	"github.com/klauspost/compress/huff0"
)

// A compressed packed trunk stores each part's image in blocks of
// compBlockBytes that decode independently, so several cores decode one
// part at once. Trained BF16 weights use few of their 256 exponent values,
// so a block is split into its 16-bit words' exponent bytes, Huffman coded
// (huff0), and their sign and mantissa bits packed into one byte per word
// and stored as they are: the mantissa is close to uniform and would not
// shrink. Each block's decoded bytes carry a CRC-32C in the index, so a
// corrupted block is refused rather than decoded into wrong weights.
//
// A block in trunk.bin is a 4-byte header (mode, and the length of the
// exponent stream as 24 bits), the exponent stream, then n/2 sign+mantissa
// bytes. The modes say how the exponent stream is stored.
const (
	compBlockBytes = 256 << 10 // raw bytes per block; its exponent stream fits huff0's block limit
	compHeader     = 4

	compExpRaw  = 0 // exponent bytes stored as they are
	compExpHuff = 1 // huff0 4-stream
	compExpRLE  = 2 // one exponent value repeated; the stream is that byte
	compExpFix  = 3 // fixed-width k-bit codes into a per-block table (compress_fixed.go)
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// compPart is a compressed part's block table.
type compPart struct {
	stored int64    // bytes in trunk.bin
	block  int      // raw bytes per block (the last may be shorter)
	offs   []int64  // of each block inside the stored bytes; len(sizes)+1 entries
	crc    []uint32 // of each block's decoded bytes
}

func (c *compPart) blocks() int { return len(c.crc) }

// blockEncoder compresses blocks; one per goroutine.
type blockEncoder struct {
	s       huff0.Scratch
	exp, sm []byte
	fix     []byte // the fixed-width exponent stream being built
	// huffOnly turns the fixed-width mode off, as packs before it were
	// written (benchmarks compare the two in one process).
	huffOnly bool
}

// encodeBlock appends the encoded raw block (even length, at most
// compBlockBytes) to dst.
func (e *blockEncoder) encodeBlock(dst, raw []byte) []byte {
	n := len(raw) / 2
	if cap(e.exp) < n {
		e.exp, e.sm = make([]byte, n), make([]byte, n)
	}
	exp, sm := e.exp[:n], e.sm[:n]
	for i := range n {
		w := binary.LittleEndian.Uint16(raw[2*i:])
		exp[i] = byte(w >> 7)
		sm[i] = byte(w>>8)&0x80 | byte(w)&0x7f
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	mode := byte(compExpRaw)
	e.s.Reuse = huff0.ReusePolicyNone
	out, _, err := huff0.Compress4X(exp, &e.s)
	huffLen := n // the exponent stream's length without the fixed-width mode
	if err == nil && len(out) < n {
		huffLen = len(out)
	}
	if !e.huffOnly && !errors.Is(err, huff0.ErrUseRLE) {
		e.fix = encodeFixed(e.fix[:0], exp)
	}
	switch {
	case !e.huffOnly && !errors.Is(err, huff0.ErrUseRLE) && preferFixed(len(e.fix), huffLen, n):
		mode = compExpFix
		dst = append(dst, e.fix...)
	case err == nil && len(out) < n:
		mode = compExpHuff
		dst = append(dst, out...)
	case errors.Is(err, huff0.ErrUseRLE):
		mode = compExpRLE
		dst = append(dst, exp[0])
	default:
		dst = append(dst, exp...)
	}
	el := len(dst) - start - compHeader
	dst[start] = mode
	dst[start+1], dst[start+2], dst[start+3] = byte(el), byte(el>>8), byte(el>>16)
	return append(dst, sm...)
}

// blockDecoder decodes blocks; one per goroutine.
type blockDecoder struct {
	s   *huff0.Scratch
	exp []byte
	fix fixedTables
}

var errBlockCorrupt = errors.New("corrupt block")

// decodeBlock decodes one stored block into dst (the block's raw length)
// and returns the CRC-32C of the decoded bytes.
func (d *blockDecoder) decodeBlock(dst, src []byte) (uint32, error) {
	n := len(dst) / 2
	if len(dst)%2 != 0 || len(src) < compHeader {
		return 0, errBlockCorrupt
	}
	mode := src[0]
	el := int(src[1]) | int(src[2])<<8 | int(src[3])<<16
	if compHeader+el+n != len(src) {
		return 0, errBlockCorrupt
	}
	es, sm := src[compHeader:compHeader+el], src[compHeader+el:]
	var exp []byte
	switch mode {
	case compExpRaw:
		if el != n {
			return 0, errBlockCorrupt
		}
		exp = es
	case compExpRLE:
		if el != 1 {
			return 0, errBlockCorrupt
		}
		if cap(d.exp) < n {
			d.exp = make([]byte, n)
		}
		exp = d.exp[:n]
		for i := range exp {
			exp[i] = es[0]
		}
	case compExpFix:
		if cap(d.exp) < n {
			d.exp = make([]byte, n)
		}
		exp = d.exp[:n]
		if !d.fix.decode(exp, es) {
			return 0, errBlockCorrupt
		}
	case compExpHuff:
		if d.s == nil {
			d.s = &huff0.Scratch{}
		}
		s, rest, err := huff0.ReadTable(es, d.s)
		if err != nil {
			return 0, errBlockCorrupt
		}
		d.s = s
		if cap(d.exp) < n {
			d.exp = make([]byte, n)
		}
		out, err := s.Decoder().Decompress4X(d.exp[:0:n], rest)
		if err != nil || len(out) != n {
			return 0, errBlockCorrupt
		}
		exp = out
	default:
		return 0, errBlockCorrupt
	}
	return mergeWords(dst, exp, sm), nil
}

// mergeChunk is the number of words merged before their bytes are
// checksummed: 16 KiB of output, so the CRC reads it from L1 right after
// the merge wrote it instead of from L2 or memory after the whole block.
const mergeChunk = 8 << 10

// mergeWords rebuilds the 16-bit words from exponent and sign+mantissa
// bytes into dst (2*len(exp) bytes) and returns the CRC-32C of dst.
func mergeWords(dst, exp, sm []byte) uint32 {
	var crc uint32
	for i := 0; i < len(exp); i += mergeChunk {
		j := min(i+mergeChunk, len(exp))
		out := dst[2*i : 2*j]
		bf16merge.Merge(out, exp[i:j], sm[i:j])
		crc = crc32.Update(crc, crcTable, out)
	}
	return crc
}

// compressImage encodes a part image (even length) into blocks, returning
// the stored bytes and the block table.
func compressImage(enc *blockEncoder, dst, img []byte) ([]byte, *compPart) {
	c := &compPart{block: compBlockBytes}
	start := len(dst)
	for off := 0; off < len(img); off += compBlockBytes {
		raw := img[off:min(off+compBlockBytes, len(img))]
		c.offs = append(c.offs, int64(len(dst)-start))
		c.crc = append(c.crc, crc32.Checksum(raw, crcTable))
		dst = enc.encodeBlock(dst, raw)
	}
	c.offs = append(c.offs, int64(len(dst)-start))
	c.stored = int64(len(dst) - start)
	return dst, c
}
