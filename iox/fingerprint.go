package iox

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
)

// Fingerprint sampling: the whole of each shard's header (names, dtypes,
// shapes, offsets) and fingerprintSamples evenly spaced windows of its data,
// which is what tells two checkpoints of the same config apart (the seed 1
// and seed 2 synthetic checkpoints, or a fine-tune of the release). A few
// small reads per shard keep it cheap enough to compute at every open.
const (
	fingerprintSamples    = 16
	fingerprintSampleSize = 4096
	fingerprintMaxHeader  = 16 << 20
)

// Fingerprint identifies the checkpoint's content: a SHA-256 over every
// shard's name, size, header and a sample of its bytes, in hex. Packed
// trunks and saved states record it, so that one made from another
// checkpoint with the same config is refused instead of giving wrong
// tokens. It is computed once and cached.
func (c *Checkpoint) Fingerprint() (string, error) {
	c.fpOnce.Do(func() { c.fp, c.fpErr = c.fingerprint() })
	return c.fp, c.fpErr
}

func (c *Checkpoint) fingerprint() (string, error) {
	h := sha256.New()
	buf := make([]byte, max(fingerprintSampleSize, 64<<10))
	for _, sh := range c.Shards {
		size := sh.Header.FileSize
		fmt.Fprintf(h, "%s\x00%d\x00", sh.Name, size)
		if sh.File == nil {
			return "", fmt.Errorf("fingerprint: shard %s is not open", sh.Name)
		}
		// The header: everything before the data section.
		hdr := min(sh.Header.DataOff, fingerprintMaxHeader)
		if _, err := io.Copy(h, io.NewSectionReader(sh.File, 0, hdr)); err != nil {
			return "", fmt.Errorf("fingerprint: %s: %w", sh.Name, err)
		}
		for _, w := range FingerprintWindows(sh.Header) {
			off, n := w[0], w[1]
			if _, err := sh.File.ReadAt(buf[:n], off); err != nil {
				return "", fmt.Errorf("fingerprint: %s: %w", sh.Name, err)
			}
			binary.Write(h, binary.LittleEndian, off)
			h.Write(buf[:n])
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:16]), nil
}

// FingerprintWindows returns the byte ranges (offset, length) of a shard
// with header h that Fingerprint reads beside the header itself: a copy of
// a checkpoint that keeps the headers and these keeps its fingerprint.
func FingerprintWindows(h *Header) [][2]int64 {
	size := h.FileSize
	data := size - h.DataOff
	var out [][2]int64
	for i := range fingerprintSamples {
		off := h.DataOff + data*int64(i)/fingerprintSamples
		if n := min(int64(fingerprintSampleSize), size-off); n > 0 {
			out = append(out, [2]int64{off, n})
		}
	}
	return out
}
