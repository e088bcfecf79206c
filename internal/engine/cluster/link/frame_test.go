package link

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"runtime"
	"strings"
	"testing"
)

// frames decodes every frame of stream with limit, until an error.
func frames(stream []byte, limit int) (kinds []uint8, payloads [][]byte, err error) {
	f := frameReader{r: bytes.NewReader(stream)}
	for {
		kind, p, err := f.read(nil, limit)
		if err != nil {
			return kinds, payloads, err
		}
		kinds, payloads = append(kinds, kind), append(payloads, p)
	}
}

func TestFrameRoundTrip(t *testing.T) {
	var stream []byte
	want := [][]byte{{}, []byte("x"), bytes.Repeat([]byte("abc"), 100_000), make([]byte, growStep+1)}
	for i, p := range want {
		stream = appendFrame(stream, uint8(i*7), p)
	}
	kinds, got, err := frames(stream, 1<<20)
	if err != io.EOF {
		t.Fatalf("stream end: %v, want io.EOF", err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d frames, want %d", len(got), len(want))
	}
	for i := range want {
		if kinds[i] != uint8(i*7) || !bytes.Equal(got[i], want[i]) {
			t.Errorf("frame %d: kind %d, %d bytes; want kind %d, %d bytes", i, kinds[i], len(got[i]), i*7, len(want[i]))
		}
	}
}

// TestFrameReusesBuffer: a payload that fits the caller's buffer lands in
// it, so a warm receiver allocates nothing.
func TestFrameReusesBuffer(t *testing.T) {
	stream := appendFrame(nil, 1, []byte("hello"))
	f := frameReader{r: bytes.NewReader(stream)}
	dst := make([]byte, 0, 64)
	_, p, err := f.read(dst, 1<<20)
	if err != nil || &p[0] != &dst[:1][0] || string(p) != "hello" {
		t.Fatalf("read into a large enough buffer: %q, %v, same array %v", p, err, err == nil && &p[0] == &dst[:1][0])
	}
}

func TestFrameFaults(t *testing.T) {
	good := appendFrame(nil, 3, []byte("payload bytes"))
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	reCRC := func(b []byte) []byte { // a header whose own CRC is right again
		binary.BigEndian.PutUint32(b[20:24], crcOf(b[:20]))
		return b
	}
	cases := []struct {
		name, msg string
		stream    []byte
		eof       bool // wraps io.ErrUnexpectedEOF
	}{
		{"bad magic", "bad magic", mutate(func(b []byte) []byte { b[0] = 'G'; return b }), false},
		{"other version", "protocol version 9", mutate(func(b []byte) []byte { b[4] = 9; return b }), false},
		{"header CRC", "header CRC", mutate(func(b []byte) []byte { b[15] ^= 1; return b }), false},
		{"flags", "flags", mutate(func(b []byte) []byte { b[7] = 1; return reCRC(b) }), false},
		{"oversized", "exceeds the limit", mutate(func(b []byte) []byte {
			binary.BigEndian.PutUint64(b[8:16], 1<<40)
			return reCRC(b)
		}), false},
		{"payload CRC", "payload CRC", mutate(func(b []byte) []byte { b[headerLen+2] ^= 0x40; return b }), false},
		{"truncated header", "truncated header", good[:10], true},
		{"truncated payload", "truncated frame", good[:len(good)-1], true},
		{"header only", "truncated frame", good[:headerLen], true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, got, err := frames(c.stream, 1<<20)
			if len(got) != 0 || !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("%d frames, error %v; want ErrProtocol mentioning %q", len(got), err, c.msg)
			}
			if errors.Is(err, io.ErrUnexpectedEOF) != c.eof {
				t.Errorf("error %v: wraps io.ErrUnexpectedEOF = %v, want %v", err, !c.eof, c.eof)
			}
		})
	}
}

func crcOf(b []byte) uint32 { return crc32.Checksum(b[:20], castagnoli) }

// hugeClaim is a valid header that claims n payload bytes.
func hugeClaim(n uint64) []byte {
	var h [headerLen]byte
	putHeader(&h, 1, 0, 0)
	binary.BigEndian.PutUint64(h[8:16], n)
	binary.BigEndian.PutUint32(h[20:24], crcOf(h[:20]))
	return h[:]
}

// TestFrameClaimAllocatesWhatArrives: a header within the limit that
// claims 1 GiB and is followed by 100 bytes costs a small allocation, not
// the claim.
func TestFrameClaimAllocatesWhatArrives(t *testing.T) {
	stream := append(hugeClaim(1<<30), make([]byte, 100)...)
	allocated := allocatedBy(func() {
		_, _, err := frames(stream, 1<<30)
		if !errors.Is(err, ErrProtocol) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("error %v, want a truncated frame", err)
		}
	})
	if allocated > 1<<20 {
		t.Errorf("a 1 GiB claim with 100 bytes behind it allocated %d bytes", allocated)
	}
}

// allocatedBy returns the bytes allocated while f runs (by any goroutine).
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// FuzzFrameDecode feeds arbitrary streams to the frame decoder (and each
// frame's payload to the Hello decoder): it must never panic, every error
// is ErrProtocol or a clean io.EOF, no payload exceeds the limit, no
// buffer grows past twice what the stream held, and a Hello that decodes
// encodes back to the same bytes.
func FuzzFrameDecode(f *testing.F) {
	hello := Hello{Protocol: Protocol, Version: "v1", Fingerprint: "fp", Kernels: "avx2/avx2", Ranks: 3, Rank: 2}
	f.Add([]byte{})
	f.Add(appendFrame(nil, 1, []byte("one frame")))
	f.Add(appendFrame(appendFrame(nil, kindNonce, make([]byte, nonceLen)), kindHello, hello.marshal()))
	f.Add(hugeClaim(1 << 40))
	f.Add(append(hugeClaim(1<<19), 1, 2, 3))
	f.Add(appendFrame(nil, 2, make([]byte, 70_000))[:50_000])
	const limit = 1 << 20
	f.Fuzz(func(t *testing.T, stream []byte) {
		r := frameReader{r: bytes.NewReader(stream)}
		var buf []byte
		for {
			_, p, err := r.read(buf, limit)
			if err != nil {
				if err != io.EOF && !errors.Is(err, ErrProtocol) {
					t.Fatalf("error %v is neither io.EOF nor ErrProtocol", err)
				}
				return
			}
			if len(p) > limit || cap(p) > max(cap(buf), growStep, 2*len(stream)) {
				t.Fatalf("payload of %d bytes, cap %d, from a stream of %d", len(p), cap(p), len(stream))
			}
			if h, err := unmarshalHello(p); err == nil {
				if !bytes.Equal(h.marshal(), p) {
					t.Fatalf("Hello %+v does not encode back to %x", h, p)
				}
			} else if !errors.Is(err, ErrProtocol) {
				t.Fatalf("Hello error %v is not ErrProtocol", err)
			}
			buf = p
		}
	})
}
