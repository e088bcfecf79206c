package cache_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/k3go/k3/cache"
)

// payloadLen is the fixture's expert size: deliberately not a multiple of
// 4096.
const payloadLen = 1632

// slotSize is what an O_DIRECT loader needs for a payloadLen expert: the
// payload plus up to 4 KiB of alignment either side.
const slotSize = payloadLen + 8192

func base(k cache.Key) int { return int(k.Layer*131+k.Expert*17) % 251 }

// want is byte i of key k's payload, derived from the key as the cache
// fixture derives its bytes: (i + base) mod 251.
func want(k cache.Key, i int) byte { return byte((i + base(k)) % 251) }

// pad is where k's payload starts inside its slot, like the offset of an
// expert inside the aligned window an O_DIRECT read covers.
func pad(k cache.Key) int { return int(k.Expert*977+k.Layer*31) % 4096 }

// fill writes k's payload into slot at pad(k) and returns it.
func fill(k cache.Key, slot []byte) []byte {
	p := slot[pad(k) : pad(k)+payloadLen]
	for i := range p {
		p[i] = want(k, i)
	}
	return p
}

func patternLoader(_ context.Context, k cache.Key, slot []byte) ([]byte, error) {
	return fill(k, slot), nil
}

func check(k cache.Key, p []byte) error {
	if len(p) != payloadLen {
		return fmt.Errorf("%v: payload has %d bytes, want %d", k, len(p), payloadLen)
	}
	for i, b := range p {
		if b != want(k, i) {
			return fmt.Errorf("%v: byte %d is %d, want %d", k, i, b, want(k, i))
		}
	}
	return nil
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// countingLoader counts calls and checks that no key is loaded by two
// calls at once.
type countingLoader struct {
	calls    atomic.Int64
	inflight [128][128]atomic.Int32
	overlap  atomic.Int64
}

func (l *countingLoader) enter(k cache.Key) {
	l.calls.Add(1)
	if l.inflight[k.Layer][k.Expert].Add(1) > 1 {
		l.overlap.Add(1)
	}
}

func (l *countingLoader) exit(k cache.Key) { l.inflight[k.Layer][k.Expert].Add(-1) }
