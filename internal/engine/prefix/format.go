package prefix

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Kind tells block entries from state entries.
type Kind uint8

const (
	// KindBlock is a block entry: the attention cache (MLA latents) of one
	// full block, keyed by the block's chain hash.
	KindBlock Kind = 1
	// KindState is a state entry: the recurrent state at a position, the
	// latents of the tail positions since the last block boundary and
	// optionally the last position's logits, keyed by k(pos).
	KindState Kind = 2
)

func (k Kind) String() string {
	switch k {
	case KindBlock:
		return "block"
	case KindState:
		return "state"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// MaxSections bounds Meta.Sections.
const MaxSections = 16

// MaxPayload bounds an entry's payload (1 TiB): a header that declares more
// is corrupt.
const MaxPayload = 1 << 40

// Meta is an entry's small metadata, stored in its header and available
// from [Reader.Meta] and [Store.Stat] before any payload is read.
type Meta struct {
	Kind Kind
	// Pos is the prefix length the entry completes: (i+1)·B for block i,
	// the position p for a state at p.
	Pos int
	// Tail is p − ⌊p/B⌋·B for a state entry, 0 for a block entry.
	Tail int
	// Anchor is the chain hash the entry hangs from: h_i for block i,
	// h_⌊p/B⌋ for a state at p. State entries are indexed by it.
	Anchor Key
	// HasLogits reports that a state entry's payload ends with the logits
	// of position p−1 (never set on a block entry).
	HasLogits bool
	// Size is the payload length in bytes.
	Size int64
	// Saves is the bytes of reads a hit on this entry avoids, as the
	// engine estimates them; it ranks entries for eviction.
	Saves int64
	// Sections optionally splits the payload into consecutive parts
	// (engine-defined: recurrent state, conv histories, tail latents,
	// logits …). When present they must sum to Size; at most MaxSections.
	Sections []int64
}

// check validates m for an entry at block size b.
func (m *Meta) check(b int) error {
	switch {
	case m.Pos < 1:
		return fmt.Errorf("position %d < 1", m.Pos)
	case m.Size < 0 || m.Size > MaxPayload:
		return fmt.Errorf("size %d outside [0, %d]", m.Size, int64(MaxPayload))
	case m.Saves < 0:
		return fmt.Errorf("negative saves %d", m.Saves)
	case len(m.Sections) > MaxSections:
		return fmt.Errorf("%d sections > %d", len(m.Sections), MaxSections)
	}
	if len(m.Sections) > 0 {
		var sum int64
		for _, s := range m.Sections {
			if s < 0 || s > MaxPayload {
				return fmt.Errorf("section length %d", s)
			}
			sum += s
		}
		if sum != m.Size {
			return fmt.Errorf("sections sum to %d, size is %d", sum, m.Size)
		}
	}
	switch m.Kind {
	case KindBlock:
		if m.Tail != 0 || m.Pos%b != 0 || m.HasLogits {
			return fmt.Errorf("block entry with tail %d, position %d (B=%d), logits %v", m.Tail, m.Pos, b, m.HasLogits)
		}
	case KindState:
		if m.Tail < 0 || m.Tail >= b || m.Tail > m.Pos || (m.Pos-m.Tail)%b != 0 {
			return fmt.Errorf("state entry with tail %d at position %d (B=%d)", m.Tail, m.Pos, b)
		}
	default:
		return fmt.Errorf("unknown kind %d", m.Kind)
	}
	return nil
}

// The entry file: a header in a fixed region of headerRegion bytes, then
// the payload, so the payload starts page-aligned (ready for O_DIRECT).
//
//	off  len  field (little-endian)
//	  0    8  magic "k3prefix"
//	  8    4  format version         } the frame every version keeps:
//	 12    4  header length H         } magic, version, H, and the
//	                                  } header CRC in its last 4 bytes
//	          (version 1: H = fixedHeader + 8·nsections + 4)
//	 16   32  fingerprint id: SHA-256(tagFingerprint ‖ fingerprint)
//	 48   32  key
//	 80    1  kind
//	 81    1  flags: bit 0 = has logits; others zero
//	 82    2  number of sections
//	 84    4  tail
//	 88   32  anchor
//	120    8  position
//	128    8  saves
//	136    8  payload length
//	144    4  payload CRC-32C
//	148    4  block size B
//	152  8·n  section lengths
//	H−4    4  header CRC-32C over bytes [0, H−4)
//	  …       zero padding to headerRegion
//	headerRegion  payload
const (
	headerRegion = 4096
	fixedHeader  = 152
	maxHeader    = fixedHeader + 8*MaxSections + 4
	flagLogits   = 1
)

var magic = [8]byte{'k', '3', 'p', 'r', 'e', 'f', 'i', 'x'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// header is a parsed entry header.
type header struct {
	fp         Key
	key        Key
	blockSize  int
	meta       Meta
	payloadCRC uint32
}

// errOtherVersion marks a header of a format version other than ours: an
// older one is bad (removed), a newer one belongs to a newer binary
// sharing the directory and is left alone.
type errOtherVersion struct{ version uint32 }

func (e errOtherVersion) Error() string {
	return fmt.Sprintf("format version %d, this build reads %d", e.version, FormatVersion)
}

func (e errOtherVersion) newer() bool { return e.version > FormatVersion }

// encode writes the header into dst (at least headerRegion bytes, zeroed
// beyond the header by the caller) and returns its length.
func (h *header) encode(dst []byte) int {
	le := binary.LittleEndian
	copy(dst[0:8], magic[:])
	n := len(h.meta.Sections)
	hl := fixedHeader + 8*n + 4
	le.PutUint32(dst[8:], FormatVersion)
	le.PutUint32(dst[12:], uint32(hl))
	copy(dst[16:48], h.fp[:])
	copy(dst[48:80], h.key[:])
	dst[80] = byte(h.meta.Kind)
	dst[81] = 0
	if h.meta.HasLogits {
		dst[81] = flagLogits
	}
	le.PutUint16(dst[82:], uint16(n))
	le.PutUint32(dst[84:], uint32(h.meta.Tail))
	copy(dst[88:120], h.meta.Anchor[:])
	le.PutUint64(dst[120:], uint64(h.meta.Pos))
	le.PutUint64(dst[128:], uint64(h.meta.Saves))
	le.PutUint64(dst[136:], uint64(h.meta.Size))
	le.PutUint32(dst[144:], h.payloadCRC)
	le.PutUint32(dst[148:], uint32(h.blockSize))
	for i, s := range h.meta.Sections {
		le.PutUint64(dst[fixedHeader+8*i:], uint64(s))
	}
	le.PutUint32(dst[hl-4:], crc32.Checksum(dst[:hl-4], castagnoli))
	return hl
}

// parseHeader parses and checks the header at the start of b (at least
// min(len, headerRegion) bytes of the file). It checks the magic, the
// version, the header checksum and the consistency of the fields; the
// caller checks the fingerprint, the key and the file length.
func parseHeader(b []byte) (header, error) {
	var h header
	le := binary.LittleEndian
	if len(b) < 16 {
		return h, fmt.Errorf("%w: %d bytes, too short for a header", ErrCorrupt, len(b))
	}
	if !bytes.Equal(b[0:8], magic[:]) {
		return h, fmt.Errorf("%w: bad magic", ErrCorrupt)
	}
	// Every version keeps this frame (magic, version, header length, and a
	// CRC-32C of the header in its last 4 bytes), so a damaged version
	// field is told from a newer build's file by the checksum.
	hl := int(le.Uint32(b[12:]))
	if hl < 20 || hl > headerRegion {
		return h, fmt.Errorf("%w: header length %d", ErrCorrupt, hl)
	}
	if len(b) < hl {
		return h, fmt.Errorf("%w: %d bytes, header needs %d", ErrCorrupt, len(b), hl)
	}
	if got, want := crc32.Checksum(b[:hl-4], castagnoli), le.Uint32(b[hl-4:]); got != want {
		return h, fmt.Errorf("%w: header checksum %08x, stored %08x", ErrCorrupt, got, want)
	}
	if v := le.Uint32(b[8:]); v != FormatVersion {
		return h, fmt.Errorf("%w: %w", ErrCorrupt, errOtherVersion{v})
	}
	if hl < fixedHeader+4 || hl > maxHeader {
		return h, fmt.Errorf("%w: header length %d", ErrCorrupt, hl)
	}
	n := int(le.Uint16(b[82:]))
	if hl != fixedHeader+8*n+4 {
		return h, fmt.Errorf("%w: header length %d for %d sections", ErrCorrupt, hl, n)
	}
	copy(h.fp[:], b[16:48])
	copy(h.key[:], b[48:80])
	flags := b[81]
	if flags&^flagLogits != 0 {
		return h, fmt.Errorf("%w: unknown flags %#x", ErrCorrupt, flags)
	}
	h.meta.Kind = Kind(b[80])
	h.meta.HasLogits = flags&flagLogits != 0
	h.meta.Tail = int(le.Uint32(b[84:]))
	copy(h.meta.Anchor[:], b[88:120])
	// Bounded before the conversion so that no value wraps to a valid int.
	pos, saves, size := le.Uint64(b[120:]), le.Uint64(b[128:]), le.Uint64(b[136:])
	if pos > MaxPayload || saves > 1<<62 || size > MaxPayload {
		return h, fmt.Errorf("%w: position %d, saves %d, size %d out of range", ErrCorrupt, pos, saves, size)
	}
	h.meta.Pos, h.meta.Saves, h.meta.Size = int(pos), int64(saves), int64(size)
	h.payloadCRC = le.Uint32(b[144:])
	bs := le.Uint32(b[148:])
	if bs < 1 || bs > MaxBlockSize {
		return h, fmt.Errorf("%w: block size %d", ErrCorrupt, bs)
	}
	h.blockSize = int(bs)
	if n > 0 {
		h.meta.Sections = make([]int64, n)
		for i := range n {
			s := le.Uint64(b[fixedHeader+8*i:])
			if s > MaxPayload {
				return h, fmt.Errorf("%w: section %d length %d", ErrCorrupt, i, s)
			}
			h.meta.Sections[i] = int64(s)
		}
	}
	if err := h.meta.check(h.blockSize); err != nil {
		return h, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return h, nil
}

// isNewerVersion reports whether err is a header of a newer format.
func isNewerVersion(err error) bool {
	var v errOtherVersion
	return errors.As(err, &v) && v.newer()
}
