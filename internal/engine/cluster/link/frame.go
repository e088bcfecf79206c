package link

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// headerLen is the size of a frame header (see the package doc).
const headerLen = 24

// magic opens every frame.
var magic = [4]byte{'K', '3', 'L', 'K'}

// castagnoli is CRC-32C's table; hash/crc32 uses the CPU's instruction
// for it where there is one.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// firstKindReserved is the first kind the handshake uses; callers send
// kinds below it.
const firstKindReserved = 0xF0

// Handshake frame kinds (see the package doc).
const (
	kindNonce   = 0xF0 // steps 1 and 2: a nonce (and the worker's key proof)
	kindHello   = 0xF1 // step 3: rank 0's proof and Hello
	kindVerdict = 0xF2 // step 4: the worker's verdict and Hello
	kindRefuse  = 0xF3 // either side: the handshake is refused, and why
)

// handshakeMaxFrame bounds frames before the peer has proven the key.
const handshakeMaxFrame = 64 << 10

// putHeader fills h for a frame of kind with a payload of n bytes whose
// CRC-32C is crc.
func putHeader(h *[headerLen]byte, kind uint8, n int, crc uint32) {
	copy(h[0:4], magic[:])
	h[4] = Protocol
	h[5] = kind
	binary.BigEndian.PutUint16(h[6:8], 0)
	binary.BigEndian.PutUint64(h[8:16], uint64(n))
	binary.BigEndian.PutUint32(h[16:20], crc)
	binary.BigEndian.PutUint32(h[20:24], crc32.Checksum(h[:20], castagnoli))
}

// appendFrame appends a whole frame to dst (tests, fuzz seeds, handshake).
func appendFrame(dst []byte, kind uint8, payload []byte) []byte {
	var h [headerLen]byte
	putHeader(&h, kind, len(payload), crc32.Checksum(payload, castagnoli))
	return append(append(dst, h[:]...), payload...)
}

// growStep is the first allocation for a payload larger than the caller's
// buffer; later steps double, never past what the frame claims.
const growStep = 64 << 10

// frameReader decodes frames from a stream. It holds no buffer of its own
// beyond the header; payloads go into the caller's.
type frameReader struct {
	r   io.Reader
	hdr [headerLen]byte
}

// read reads one frame whose payload is at most limit bytes into dst, grown
// if needed, and returns its kind and payload (dst's array when it was
// large enough). It returns io.EOF, unwrapped, when the stream ends
// cleanly before a frame; every other error of the stream is returned
// wrapped, and every fault of the frame wraps ErrProtocol.
func (f *frameReader) read(dst []byte, limit int) (uint8, []byte, error) {
	h := &f.hdr
	if n, err := io.ReadFull(f.r, h[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, fmt.Errorf("%w: truncated header (%d of %d bytes): %w", ErrProtocol, n, headerLen, err)
		}
		return 0, nil, err
	}
	if [4]byte(h[0:4]) != magic {
		return 0, nil, fmt.Errorf("%w: bad magic %q (not a k3 link peer?)", ErrProtocol, h[0:4])
	}
	if h[4] != Protocol {
		return 0, nil, fmt.Errorf("%w: frame protocol version %d, this side speaks %d", ErrProtocol, h[4], Protocol)
	}
	if got, want := crc32.Checksum(h[:20], castagnoli), binary.BigEndian.Uint32(h[20:24]); got != want {
		return 0, nil, fmt.Errorf("%w: header CRC %08x, header says %08x", ErrProtocol, got, want)
	}
	if flags := binary.BigEndian.Uint16(h[6:8]); flags != 0 {
		return 0, nil, fmt.Errorf("%w: unknown frame flags %#04x", ErrProtocol, flags)
	}
	kind := h[5]
	n64 := binary.BigEndian.Uint64(h[8:16])
	if n64 > uint64(limit) {
		return 0, nil, fmt.Errorf("%w: frame of %d bytes exceeds the limit of %d", ErrProtocol, n64, limit)
	}
	n := int(n64)
	payload, err := f.readPayload(dst, n)
	if err != nil {
		return 0, nil, err
	}
	if got, want := crc32.Checksum(payload, castagnoli), binary.BigEndian.Uint32(h[16:20]); got != want {
		return 0, nil, fmt.Errorf("%w: payload CRC %08x, header says %08x (%d bytes, kind %#02x)", ErrProtocol, got, want, n, kind)
	}
	return kind, payload, nil
}

// readPayload reads n bytes into dst, growing it in steps as the bytes
// arrive so that a peer that claims much and sends little makes it
// allocate at most about twice what it sent.
func (f *frameReader) readPayload(dst []byte, n int) ([]byte, error) {
	if cap(dst) >= n {
		dst = dst[:n]
		if got, err := io.ReadFull(f.r, dst); err != nil {
			return nil, truncated(err, got, n)
		}
		return dst, nil
	}
	buf := dst[:cap(dst)]
	have := 0
	for have < n {
		if have == len(buf) {
			size := min(n, max(2*len(buf), growStep))
			grown := make([]byte, size)
			copy(grown, buf[:have])
			buf = grown
		}
		got, err := io.ReadFull(f.r, buf[have:])
		have += got
		if err != nil {
			return nil, truncated(err, have, n)
		}
	}
	return buf[:n], nil
}

// truncated reports a payload read that stopped after got of n bytes.
func truncated(err error, got, n int) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: truncated frame (%d of %d payload bytes): %w", ErrProtocol, got, n, io.ErrUnexpectedEOF)
	}
	return fmt.Errorf("inside a frame (%d of %d payload bytes): %w", got, n, err)
}
