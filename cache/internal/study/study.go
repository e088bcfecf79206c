// Package study holds the material of the expert-cache policy study
// (docs/perf-cache.md): the trace reader, Belady's offline optimum, the
// comparison policies (ARC, per-layer LFU) and synthetic traces. None of it
// is part of the cache's API.
package study

import (
	"container/heap"
	"encoding/binary"
	"fmt"
	"os"

	"github.com/k3go/k3/cache"
)

// ReadTrace reads an expert trace: int32 little-endian (layer, expert) pairs
// in request order, no header.
func ReadTrace(path string) ([]cache.Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b)%8 != 0 {
		return nil, fmt.Errorf("study: %s: %d bytes is not a whole number of (layer, expert) int32 pairs", path, len(b))
	}
	t := make([]cache.Key, len(b)/8)
	for i := range t {
		t[i] = cache.Key{
			Layer:  int32(binary.LittleEndian.Uint32(b[8*i:])),
			Expert: int32(binary.LittleEndian.Uint32(b[8*i+4:])),
		}
	}
	return t, nil
}

// Belady returns the hits of Belady's MIN on trace with the given number of
// slots: on a miss with the cache full, evict the resident key whose next
// request is furthest away (never requested again counts as infinitely far).
// It is the offline optimum for hit count, the ceiling for any online policy.
func Belady(trace []cache.Key, slots int) int64 {
	n := len(trace)
	const never = int(^uint(0) >> 1)
	next := make([]int, n)
	last := make(map[cache.Key]int)
	for i := n - 1; i >= 0; i-- {
		if j, ok := last[trace[i]]; ok {
			next[i] = j
		} else {
			next[i] = never
		}
		last[trace[i]] = i
	}
	res := make(map[cache.Key]int, slots) // key -> its next request
	h := &farHeap{}
	var hits int64
	for i, k := range trace {
		if _, ok := res[k]; ok {
			hits++
		} else if len(res) >= slots {
			for { // lazy deletion: skip stale heap entries
				top := heap.Pop(h).(farItem)
				if nx, ok := res[top.key]; ok && nx == top.next {
					delete(res, top.key)
					break
				}
			}
		}
		res[k] = next[i]
		heap.Push(h, farItem{next[i], k})
	}
	return hits
}

type farItem struct {
	next int
	key  cache.Key
}

type farHeap []farItem

func (h farHeap) Len() int           { return len(h) }
func (h farHeap) Less(i, j int) bool { return h[i].next > h[j].next }
func (h farHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *farHeap) Push(x any)        { *h = append(*h, x.(farItem)) }
func (h *farHeap) Pop() any {
	o := *h
	x := o[len(o)-1]
	*h = o[:len(o)-1]
	return x
}
