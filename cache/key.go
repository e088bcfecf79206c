package cache

import "fmt"

// Key names one routed expert: a MoE layer and an expert index within it.
type Key struct {
	Layer  int32
	Expert int32
}

func (k Key) String() string { return fmt.Sprintf("L%d/E%d", k.Layer, k.Expert) }

// hash mixes a key into 64 well-spread bits (the splitmix64 finaliser).
// Tables use the low bits; the adaptive policy samples on the top 16.
func (k Key) hash() uint64 {
	x := uint64(uint32(k.Layer))<<32 | uint64(uint32(k.Expert))
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
