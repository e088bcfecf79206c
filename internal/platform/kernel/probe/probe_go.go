package probe

import (
	"encoding/binary"
	"math"
)

// sink takes the probes' results so that their loops do real work; nothing
// reads it.
//
//lint:ignore U1000 written, never read, on purpose
var sink uint64

func fmaGo(iters int) float64 {
	var a [8]float64
	for i := 0; i < iters; i++ {
		for k := range a {
			a[k] = math.FMA(a[k], 0.999, 1e-9)
		}
	}
	sink += math.Float64bits(a[0])
	return float64(iters) * 8 * 2
}

func readGo(buf []byte) {
	var s uint64
	for i := 0; i+32 <= len(buf); i += 32 {
		s |= binary.LittleEndian.Uint64(buf[i:]) | binary.LittleEndian.Uint64(buf[i+8:]) |
			binary.LittleEndian.Uint64(buf[i+16:]) | binary.LittleEndian.Uint64(buf[i+24:])
	}
	sink += s
}
