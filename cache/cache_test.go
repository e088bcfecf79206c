package cache_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/k3go/k3/cache"
)

func newCache(t testing.TB, slots int, p cache.Policy) *cache.Cache {
	t.Helper()
	c, err := cache.New(cache.Options{SlotSize: slotSize, Budget: int64(slots) * 12288, Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	if c.Slots() != slots || c.Stride() != 12288 {
		t.Fatalf("New: %d slots of stride %d, want %d of 12288", c.Slots(), c.Stride(), slots)
	}
	return c
}

func get(t testing.TB, c *cache.Cache, k cache.Key) *cache.Handle {
	t.Helper()
	h, err := c.Get(context.Background(), k, patternLoader)
	if err != nil {
		t.Fatalf("Get(%v): %v", k, err)
	}
	if err := check(k, h.Bytes()); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestNewOptions(t *testing.T) {
	if _, err := cache.New(cache.Options{Budget: 1 << 20}); err == nil {
		t.Error("New without SlotSize: no error")
	}
	if _, err := cache.New(cache.Options{SlotSize: 100}); err == nil {
		t.Error("New without Budget or Arena: no error")
	}
	_, err := cache.New(cache.Options{SlotSize: slotSize, Budget: 16 * 12288, MinSlots: 17})
	if !errors.Is(err, cache.ErrBudget) {
		t.Errorf("16 slots with MinSlots 17: %v, want ErrBudget", err)
	}
	c, err := cache.New(cache.Options{SlotSize: slotSize, Budget: 17*12288 + 12287, MinSlots: 17})
	if err != nil || c.Slots() != 17 {
		t.Errorf("17.99 slots: %v, %d slots", err, c.Slots())
	}
	_, err = cache.New(cache.Options{SlotSize: 4096, Budget: 8192, Alloc: func(n int) ([]byte, error) { return make([]byte, n-1), nil }})
	if err == nil {
		t.Error("short Alloc: no error")
	}
	boom := errors.New("no memory")
	_, err = cache.New(cache.Options{SlotSize: 4096, Budget: 8192, Alloc: func(int) ([]byte, error) { return nil, boom }})
	if !errors.Is(err, boom) {
		t.Errorf("failing Alloc: %v", err)
	}
}

// TestArenaLayout checks the slot layout: stride rounded up to 4096, every
// slot start 4096-aligned (the default allocator aligns; a caller's aligned
// arena keeps it), slots disjoint and inside the arena, and a Budget capping
// a larger arena.
func TestArenaLayout(t *testing.T) {
	raw := make([]byte, 9*12288+4096)
	off := int((4096 - addr(raw)%4096) % 4096)
	arena := raw[off : off+9*12288]
	var calls []uintptr
	layout := func(_ context.Context, k cache.Key, slot []byte) ([]byte, error) {
		calls = append(calls, addr(slot))
		if len(slot) != 12288 || cap(slot) != 12288 {
			t.Errorf("slot len %d cap %d, want 12288", len(slot), cap(slot))
		}
		return fill(k, slot), nil
	}
	for _, tc := range []struct {
		name  string
		opts  cache.Options
		slots int
		lo    uintptr
	}{
		{"default", cache.Options{SlotSize: slotSize, Budget: 9 * 12288}, 9, 0},
		{"arena", cache.Options{SlotSize: slotSize, Arena: arena}, 9, addr(arena)},
		{"arena+budget", cache.Options{SlotSize: slotSize, Arena: arena, Budget: 5*12288 + 1}, 5, addr(arena)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := cache.New(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if c.Slots() != tc.slots {
				t.Fatalf("%d slots, want %d", c.Slots(), tc.slots)
			}
			calls = calls[:0]
			for e := range int32(tc.slots) {
				h, err := c.Get(context.Background(), cache.Key{Layer: 1, Expert: e}, layout)
				if err != nil {
					t.Fatal(err)
				}
				if err := check(h.Key(), h.Bytes()); err != nil {
					t.Fatal(err)
				}
				if got, lo := addr(h.Bytes()), calls[len(calls)-1]; got != lo+uintptr(pad(h.Key())) {
					t.Errorf("payload at slot+%d, loader put it at +%d", got-lo, pad(h.Key()))
				}
				h.Release()
			}
			seen := map[uintptr]bool{}
			lo := tc.lo
			if lo == 0 {
				lo = calls[0]
				for _, a := range calls {
					lo = min(lo, a)
				}
			}
			for _, a := range calls {
				if a%4096 != 0 {
					t.Errorf("slot at %#x is not 4096-aligned", a)
				}
				if (a-lo)%12288 != 0 || (a-lo)/12288 >= uintptr(tc.slots) || seen[a] {
					t.Errorf("slot at arena+%d: not a distinct slot of the arena", a-lo)
				}
				seen[a] = true
			}
		})
	}
}

func TestHitMissStats(t *testing.T) {
	c := newCache(t, 17, nil)
	k := cache.Key{Layer: 3, Expert: 7}
	get(t, c, k).Release()
	h := get(t, c, k)
	s := c.Stats()
	if s.Requests != 2 || s.Hits != 1 || s.Misses != 1 || s.InflightWaits != 0 || s.BytesLoaded != payloadLen ||
		s.Resident != 1 || s.Pinned != 1 || s.Loading != 0 || s.Slots != 17 || s.Stride != 12288 {
		t.Errorf("stats %+v", s)
	}
	if s.HitRate() != 0.5 {
		t.Errorf("HitRate %v", s.HitRate())
	}
	h.Release()
	if s := c.Stats(); s.Pinned != 0 {
		t.Errorf("after Release: %d pinned", s.Pinned)
	}
}

// TestEvictionAndPins runs many more keys than slots through a K+1-slot
// cache while holding K handles: the pinned experts must stay resident and
// intact however much is evicted around them.
func TestEvictionAndPins(t *testing.T) {
	for _, p := range []struct {
		name string
		new  func() cache.Policy
	}{{"LRU", func() cache.Policy { return cache.NewLRU() }}, {"Adaptive", func() cache.Policy { return cache.NewAdaptive(cache.AdaptiveOptions{}) }}} {
		t.Run(p.name, func(t *testing.T) {
			const K = 16
			c := newCache(t, K+1, p.new())
			var pinned []*cache.Handle
			for e := range int32(K) {
				pinned = append(pinned, get(t, c, cache.Key{Layer: 1, Expert: e}))
			}
			r := rand.New(rand.NewPCG(1, 2))
			for range 2000 {
				k := cache.Key{Layer: 1 + r.Int32N(8), Expert: 100 + r.Int32N(50)}
				get(t, c, k).Release()
			}
			s := c.Stats()
			if s.Evictions < 1900 {
				t.Errorf("only %d evictions", s.Evictions)
			}
			for _, h := range pinned {
				if err := check(h.Key(), h.Bytes()); err != nil {
					t.Fatalf("pinned expert overwritten: %v", err)
				}
				hits := c.Stats().Hits
				get(t, c, h.Key()).Release()
				if c.Stats().Hits != hits+1 {
					t.Errorf("pinned %v was evicted", h.Key())
				}
				h.Release()
			}
		})
	}
}

// TestFillRules covers the two-step API's edge cases.
func TestFillRules(t *testing.T) {
	ctx := context.Background()
	c := newCache(t, 4, nil)
	if err := (cache.Fill{}).Run(ctx, patternLoader); !errors.Is(err, cache.ErrNotLoader) {
		t.Errorf("zero Fill: %v", err)
	}
	k := cache.Key{Layer: 2, Expert: 5}
	h, f, err := c.Start(ctx, k)
	if err != nil || !f.Pending() {
		t.Fatalf("Start: %v, pending %v", err, f.Pending())
	}
	if h.Bytes() != nil {
		t.Error("Bytes before the load")
	}
	if err := f.Run(ctx, patternLoader); err != nil {
		t.Fatal(err)
	}
	if err := f.Run(ctx, patternLoader); !errors.Is(err, cache.ErrNotLoader) {
		t.Errorf("second Run: %v", err)
	}
	p, err := h.Wait(ctx)
	if err != nil || check(k, p) != nil {
		t.Fatalf("Wait: %v", err)
	}
	h2, f2, err := c.Start(ctx, k)
	if err != nil || f2.Pending() || check(k, h2.Bytes()) != nil {
		t.Errorf("Start on a resident key: %v, pending %v", err, f2.Pending())
	}
	h.Release()
	h2.Release()

	// A loader that returns bytes outside its slot is an error.
	bad := func(context.Context, cache.Key, []byte) ([]byte, error) { return make([]byte, 10), nil }
	if _, err := c.Get(ctx, cache.Key{Layer: 2, Expert: 6}, bad); err == nil {
		t.Error("payload outside the slot: no error")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("double Release: no panic")
			}
		}()
		h := get(t, c, k)
		h.Release()
		h.Release()
	}()
}

// TestReleaseBeforeFill abandons a reserved load: the other holder gets
// ErrLoadAbandoned, the stale Fill reads nothing, the next request loads.
func TestReleaseBeforeFill(t *testing.T) {
	ctx := context.Background()
	c := newCache(t, 4, nil)
	k := cache.Key{Layer: 1, Expert: 1}
	h1, f, err := c.Start(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	h2, f2, err := c.Start(ctx, k)
	if err != nil || f2.Pending() {
		t.Fatalf("second Start: %v, pending %v", err, f2.Pending())
	}
	h1.Release()
	if _, err := h2.Wait(ctx); !errors.Is(err, cache.ErrLoadAbandoned) {
		t.Errorf("holder of an abandoned load: %v", err)
	}
	h2.Release()
	called := false
	if err := f.Run(ctx, func(context.Context, cache.Key, []byte) ([]byte, error) {
		called = true
		return nil, nil
	}); !errors.Is(err, cache.ErrNotLoader) || called {
		t.Errorf("stale Fill: %v, loader called %v", err, called)
	}
	get(t, c, k).Release()
	if s := c.Stats(); s.Misses != 2 || s.InflightWaits != 1 || s.LoadErrors != 1 || s.Resident != 1 {
		t.Errorf("stats %+v", s)
	}
}

// TestInflightDedup: concurrent requests for an expert being read wait for
// that read instead of starting their own, and are counted as in-flight
// waits, not hits.
func TestInflightDedup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCache(t, 17, nil)
		k := cache.Key{Layer: 9, Expert: 42}
		gate := make(chan struct{})
		var calls atomic.Int32
		slow := func(ctx context.Context, k cache.Key, slot []byte) ([]byte, error) {
			calls.Add(1)
			<-gate
			return fill(k, slot), nil
		}
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() {
				h, err := c.Get(context.Background(), k, slow)
				if err != nil {
					t.Error(err)
					return
				}
				if err := check(k, h.Bytes()); err != nil {
					t.Error(err)
				}
				h.Release()
			})
		}
		synctest.Wait()
		if n := calls.Load(); n != 1 {
			t.Errorf("%d loads in flight for one key", n)
		}
		if s := c.Stats(); s.Misses != 1 || s.InflightWaits != 9 || s.Hits != 0 || s.Loading != 1 {
			t.Errorf("stats while loading %+v", s)
		}
		close(gate)
		wg.Wait()
		if s := c.Stats(); s.BytesLoaded != payloadLen || s.Pinned != 0 || s.Resident != 1 {
			t.Errorf("stats after %+v", s)
		}
	})
}

// TestLoadErrorReachesWaiters: every waiter gets the error, the slot is
// left empty, and the next request retries.
func TestLoadErrorReachesWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCache(t, 17, nil)
		k := cache.Key{Layer: 4, Expert: 4}
		boom := errors.New("short read")
		gate := make(chan struct{})
		failing := func(context.Context, cache.Key, []byte) ([]byte, error) {
			<-gate
			return nil, boom
		}
		var wg sync.WaitGroup
		var failed atomic.Int32
		for range 5 {
			wg.Go(func() {
				if _, err := c.Get(context.Background(), k, failing); errors.Is(err, boom) {
					failed.Add(1)
				} else {
					t.Errorf("waiter got %v, want %v", err, boom)
				}
			})
		}
		synctest.Wait()
		close(gate)
		wg.Wait()
		if failed.Load() != 5 {
			t.Errorf("%d of 5 requests saw the error", failed.Load())
		}
		if s := c.Stats(); s.LoadErrors != 1 || s.Resident != 0 || s.Loading != 0 || s.Pinned != 0 || s.Misses != 1 {
			t.Errorf("stats after failure %+v", s)
		}
		get(t, c, k).Release()
		if s := c.Stats(); s.Misses != 2 || s.Resident != 1 {
			t.Errorf("retry: stats %+v", s)
		}
	})
}

// TestCancellation: a request waiting on someone else's load gives up when
// its context ends (the load goes on); when the loading request's context
// ends, the others retry the load themselves.
func TestCancellation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCache(t, 17, nil)
		k := cache.Key{Layer: 5, Expert: 1}
		var calls atomic.Int32
		blockUntilDone := func(ctx context.Context, k cache.Key, slot []byte) ([]byte, error) {
			if calls.Add(1) == 1 {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return fill(k, slot), nil
		}
		ctxA, cancelA := context.WithCancel(context.Background())
		ctxB, cancelB := context.WithTimeout(context.Background(), time.Second)
		defer cancelB()
		var wg sync.WaitGroup
		var errA, errB, errC error
		wg.Go(func() { _, errA = c.Get(ctxA, k, blockUntilDone) })
		synctest.Wait()
		wg.Go(func() { _, errB = c.Get(ctxB, k, blockUntilDone) })
		var hC *cache.Handle
		wg.Go(func() { hC, errC = c.Get(context.Background(), k, blockUntilDone) })
		time.Sleep(2 * time.Second) // B's deadline passes in the bubble
		synctest.Wait()
		if !errors.Is(errB, context.DeadlineExceeded) {
			t.Errorf("waiter with an expired context: %v", errB)
		}
		cancelA()
		wg.Wait()
		if !errors.Is(errA, context.Canceled) {
			t.Errorf("canceled loader: %v", errA)
		}
		if errC != nil || check(k, hC.Bytes()) != nil {
			t.Fatalf("waiter whose loader was canceled did not retry: %v", errC)
		}
		hC.Release()
		if calls.Load() != 2 {
			t.Errorf("%d loads, want 2", calls.Load())
		}
		if s := c.Stats(); s.Requests != 3 || s.Pinned != 0 || s.Loading != 0 || s.Resident != 1 {
			t.Errorf("stats %+v", s)
		}
	})
}

// TestWaitForSlot: with every slot pinned a request waits, rather than
// failing or going over budget, until a release or its context's end.
func TestWaitForSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCache(t, 2, nil)
		h1 := get(t, c, cache.Key{Layer: 1, Expert: 1})
		h2 := get(t, c, cache.Key{Layer: 1, Expert: 2})

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := c.Get(ctx, cache.Key{Layer: 1, Expert: 3}, patternLoader)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("request with every slot pinned: %v", err)
		}

		done := make(chan *cache.Handle)
		go func() { done <- get(t, c, cache.Key{Layer: 1, Expert: 4}) }()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("request got a slot while every slot was pinned")
		default:
		}
		h1.Release()
		h4 := <-done
		if s := c.Stats(); s.SlotWaits != 2 || s.Canceled != 1 || s.Evictions != 1 || s.Requests != 4 {
			t.Errorf("stats %+v", s)
		}
		h2.Release()
		h4.Release()
	})
}

// TestPrefetch issues a layer's reads as a batch (with a duplicate) on a
// bounded pool of I/O goroutines and consumes the experts in order.
func TestPrefetch(t *testing.T) {
	ctx := context.Background()
	c := newCache(t, 17, nil)
	var loads countingLoader
	gate := make(chan struct{})
	load := func(ctx context.Context, k cache.Key, slot []byte) ([]byte, error) {
		loads.enter(k)
		defer loads.exit(k)
		<-gate
		return fill(k, slot), nil
	}
	work := make(chan cache.Fill, 16)
	var wg sync.WaitGroup
	for range 4 { // the I/O layer's queue depth
		wg.Go(func() {
			for f := range work {
				f.Run(ctx, load)
			}
		})
	}
	keys := make([]cache.Key, 16)
	for i := range keys {
		keys[i] = cache.Key{Layer: 7, Expert: int32(i * 3 % 13)} // 13 distinct, 3 duplicates
	}
	hs := make([]*cache.Handle, len(keys))
	if err := c.Prefetch(ctx, keys, hs, func(f cache.Fill) { work <- f }); err != nil {
		t.Fatal(err)
	}
	close(gate) // the reads complete only after every request was issued
	for i, h := range hs {
		p, err := h.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := check(keys[i], p); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range hs {
		h.Release()
	}
	close(work)
	wg.Wait()
	if n := loads.calls.Load(); n != 13 || loads.overlap.Load() != 0 {
		t.Errorf("%d loads (%d overlapping) for 13 distinct experts", n, loads.overlap.Load())
	}
	if s := c.Stats(); s.Misses != 13 || s.InflightWaits != 3 || s.Pinned != 0 {
		t.Errorf("stats %+v", s)
	}
	if err := c.Prefetch(ctx, keys, hs[:3], nil); err == nil {
		t.Error("Prefetch with too few handles: no error")
	}
}

// TestConcurrentStress hammers a small cache from many goroutines with
// overlapping keys, failing loads, canceled requests and batch prefetches,
// checking every payload byte, that no expert is ever read twice at once,
// that the counters add up and that no goroutine is left behind.
func TestConcurrentStress(t *testing.T) {
	before := runtime.NumGoroutine()
	for _, p := range []struct {
		name string
		new  func() cache.Policy
	}{{"LRU", func() cache.Policy { return cache.NewLRU() }}, {"Adaptive", func() cache.Policy { return cache.NewAdaptive(cache.AdaptiveOptions{}) }}} {
		t.Run(p.name, func(t *testing.T) {
			const slots = 17
			c := newCache(t, slots, p.new())
			var loads countingLoader
			var failures atomic.Int64
			load := func(ctx context.Context, k cache.Key, slot []byte) ([]byte, error) {
				loads.enter(k)
				defer loads.exit(k)
				runtime.Gosched()
				if rand.IntN(20) == 0 {
					failures.Add(1)
					return nil, errors.New("injected read error")
				}
				return fill(k, slot), nil
			}
			iters := 400
			if testing.Short() {
				iters = 100
			}
			var wg sync.WaitGroup
			for g := range 24 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(g), 99))
					key := func() cache.Key { return cache.Key{Layer: 1 + r.Int32N(4), Expert: r.Int32N(12)} }
					for range iters {
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(2000))*time.Microsecond)
						if r.IntN(4) == 0 { // a batch, loaded inline by submit
							keys := []cache.Key{key(), key(), key()}
							hs := make([]*cache.Handle, 3)
							if err := c.Prefetch(ctx, keys, hs, func(f cache.Fill) { f.Run(ctx, load) }); err == nil {
								for i, h := range hs {
									if p, err := h.Wait(ctx); err == nil {
										if err := check(keys[i], p); err != nil {
											t.Error(err)
										}
									}
								}
								runtime.Gosched()
								for i, h := range hs {
									if p := h.Bytes(); p != nil {
										if err := check(keys[i], p); err != nil {
											t.Error("pinned bytes changed:", err)
										}
									}
									h.Release()
								}
							}
						} else {
							k := key()
							if h, err := c.Get(ctx, k, load); err == nil {
								if err := check(k, h.Bytes()); err != nil {
									t.Error(err)
								}
								runtime.Gosched()
								if err := check(k, h.Bytes()); err != nil {
									t.Error("pinned bytes changed:", err)
								}
								h.Release()
							}
						}
						cancel()
					}
				})
			}
			wg.Wait()
			if n := loads.overlap.Load(); n != 0 {
				t.Errorf("%d loads overlapped another load of the same expert", n)
			}
			s := c.Stats()
			if s.Requests != s.Hits+s.InflightWaits+s.Misses+s.Canceled {
				t.Errorf("requests don't add up: %+v", s)
			}
			if s.Pinned != 0 || s.Loading != 0 || s.Resident > slots {
				t.Errorf("after all releases: %+v", s)
			}
			// A request whose loader gave up retries the load itself, within
			// the same request: loader calls >= misses.
			if s.Misses > loads.calls.Load() || s.LoadErrors < failures.Load() {
				t.Errorf("%d misses, %d loader calls, %d load errors, %d injected failures", s.Misses, loads.calls.Load(), s.LoadErrors, failures.Load())
			}
			t.Logf("%+v", s)
		})
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines before, %d after", before, n)
	}
}

// TestNoAllocs: once warm, hits, misses with eviction, and Stats do not
// allocate.
func TestNoAllocs(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("allocation counts are not meaningful under -cover or -race")
	}
	ctx := context.Background()
	for _, p := range []struct {
		name string
		new  func() cache.Policy
	}{{"LRU", func() cache.Policy { return cache.NewLRU() }}, {"Adaptive", func() cache.Policy { return cache.NewAdaptive(cache.AdaptiveOptions{}) }}} {
		t.Run(p.name, func(t *testing.T) {
			c := newCache(t, 17, p.new())
			load := cache.Loader(patternLoader)
			hit := cache.Key{Layer: 1, Expert: 1}
			get(t, c, hit).Release()
			if n := testing.AllocsPerRun(1000, func() {
				h, err := c.Get(ctx, hit, load)
				if err != nil {
					t.Fatal(err)
				}
				h.Release()
			}); n != 0 {
				t.Errorf("hit: %v allocations", n)
			}
			i := 0
			miss := func() {
				i++
				k := cache.Key{Layer: int32(1 + i%92), Expert: int32(i % 64)}
				h, err := c.Get(ctx, k, load)
				if err != nil {
					t.Fatal(err)
				}
				h.Release()
			}
			for range 2000 {
				miss()
			}
			ev := c.Stats().Evictions
			if n := testing.AllocsPerRun(1000, miss); n != 0 {
				t.Errorf("miss: %v allocations", n)
			}
			if c.Stats().Evictions < ev+900 {
				t.Error("the miss loop did not miss")
			}
			if n := testing.AllocsPerRun(100, func() { _ = c.Stats() }); n != 0 {
				t.Errorf("Stats: %v allocations", n)
			}
		})
	}
}

func BenchmarkGet(b *testing.B) {
	ctx := context.Background()
	for _, p := range []struct {
		name string
		new  func() cache.Policy
	}{{"LRU", func() cache.Policy { return cache.NewLRU() }}, {"Adaptive", func() cache.Policy { return cache.NewAdaptive(cache.AdaptiveOptions{}) }}} {
		noCopy := func(_ context.Context, k cache.Key, slot []byte) ([]byte, error) { return slot[:payloadLen], nil }
		b.Run(p.name+"/hit", func(b *testing.B) {
			c := newCache(b, 1024, p.new())
			keys := make([]cache.Key, 512)
			for i := range keys {
				keys[i] = cache.Key{Layer: int32(1 + i/16), Expert: int32(i % 16)}
				h, _ := c.Get(ctx, keys[i], noCopy)
				h.Release()
			}
			i := 0
			for b.Loop() {
				h, err := c.Get(ctx, keys[i%len(keys)], noCopy)
				if err != nil {
					b.Fatal(err)
				}
				h.Release()
				i++
			}
		})
		b.Run(p.name+"/miss", func(b *testing.B) {
			c := newCache(b, 1024, p.new())
			i := 0
			for b.Loop() {
				// A cyclic scan over 92 layers x 64 experts, larger than the
				// cache; the loader does no I/O, so this times the cache.
				h, err := c.Get(ctx, cache.Key{Layer: int32(1 + i/64%92), Expert: int32(i % 64)}, noCopy)
				if err != nil {
					b.Fatal(err)
				}
				h.Release()
				i++
			}
			s := c.Stats()
			b.ReportMetric(float64(s.Hits)/float64(s.Requests), "hit/op")
		})
	}
}

// TestResidentAndTouch checks that Resident reports only ready entries and
// counts nothing, and that Touch feeds the policy without touching Stats.
func TestResidentAndTouch(t *testing.T) {
	ctx := context.Background()
	p := &countingPolicy{Policy: cache.NewLRU()}
	c, err := cache.New(cache.Options{SlotSize: 4096, Budget: 4 * 4096, Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	k := cache.Key{Layer: 1, Expert: 2}
	if c.Resident(k) {
		t.Fatal("empty cache reports a resident key")
	}
	h, err := c.Get(ctx, k, func(_ context.Context, _ cache.Key, slot []byte) ([]byte, error) { return slot[:8], nil })
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	if !c.Resident(k) {
		t.Fatal("loaded key not resident")
	}
	before := c.Stats()
	n0 := p.accesses
	c.Touch(k, 3)
	c.Touch(cache.Key{Layer: 9, Expert: 9}, 2)
	if got := p.accesses - n0; got != 5 {
		t.Fatalf("Touch made %d policy accesses, want 5", got)
	}
	if c.Stats() != before {
		t.Fatalf("Touch changed Stats: %+v -> %+v", before, c.Stats())
	}
	if c.Resident(cache.Key{Layer: 9, Expert: 9}) {
		t.Fatal("touched key became resident")
	}
}

type countingPolicy struct {
	cache.Policy
	accesses int
}

func (p *countingPolicy) Access(k cache.Key, slot int) { p.accesses++; p.Policy.Access(k, slot) }
