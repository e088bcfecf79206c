package engine

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	"github.com/k3go/k3/internal/engine/planner"
	"github.com/k3go/k3/model"
)

// The engine owns where its budget goes while it runs. The planner prices
// the plans one budget allows (planner.Residency: the resting plan, whose
// passes are sized for decoding and whose memory holds weights, and plans
// of wider passes) and chooses one for the work waiting; the batcher asks
// before every pass (prepare), and the engine moves there between passes
// (moveTo): the expert cache and the pass's scratch are given back, the
// trunk replanned (parts pinned or streamed, another ring), and the new
// scratch and cache mapped. Every move gives back before it takes, so the
// process stays inside the budget, and no plan changes a bit of output.

// prepare implements passRoom for the batcher: it moves to the plan the
// work waiting calls for and returns that plan's scratch and rows. Only
// the batcher's goroutine calls it.
func (e *Engine) prepare(w planner.Work) (*model.Scratch, int, error) {
	if e.moveErr != nil {
		// A failed move left the engine between plans: settle in the
		// resting plan before anything runs.
		if err := e.moveTo(0); err != nil {
			return nil, 0, err
		}
	}
	cur := int(e.cur.Load())
	if i := e.res.Choose(cur, w); i != cur {
		if err := e.moveTo(i); err != nil {
			if i != 0 {
				// The wider plan did not come about; the resting one
				// still serves.
				e.log.Warn("k3: moving to a wider pass failed; back to the resting plan", "err", err)
				if err := e.moveTo(0); err == nil {
					return e.sc, e.res.Plans[0].Rows, nil
				}
			}
			return nil, 0, err
		}
	}
	return e.sc, e.res.Plans[e.cur.Load()].Rows, nil
}

// moveTo moves the engine to plan i of its residency, between passes.
func (e *Engine) moveTo(i int) (err error) {
	to := e.res.Plans[i]
	from := e.res.Plans[e.cur.Load()]
	defer func() {
		if err != nil {
			e.moveErr = fmt.Errorf("k3: moving the memory plan to passes of %d rows: %w", to.Rows, err)
			err = e.moveErr
			return
		}
		e.moveErr = nil
		e.cur.Store(int32(i))
		e.moves.Add(1)
	}()
	e.log.Debug("k3: memory plan moves", "from_rows", from.Rows, "to_rows", to.Rows,
		"pinned", planner.Human(to.PinnedBytes), "cache_slots", to.CacheSlots)
	// Give back first: the cache's arena, the scratch; the trunk gives back
	// its ring and the parts it stops pinning before it reads new ones.
	if e.xs != nil && e.cacheArena != nil {
		e.xs.Suspend()
		e.freeBuf(e.cacheArena)
		e.cacheArena = nil
	}
	if e.scratchBuf != nil {
		e.sc = nil
		e.freeBuf(e.scratchBuf)
		e.scratchBuf = nil
	}
	e.limit.Set(to.HeapLimit())
	if err := e.trunk.Replan(e.moveCtx, to, e.alloc, e.freeBuf); err != nil {
		return err
	}
	if err := e.newScratch(to); err != nil {
		return err
	}
	if e.xs != nil {
		arena, err := e.alloc(int64(to.CacheSlots) * to.CacheSlotBytes)
		if err != nil {
			return fmt.Errorf("expert cache: %w", err)
		}
		if err := e.xs.Resume(e.m.Cfg.TopK, to.CacheSlots, arena); err != nil {
			e.freeBuf(arena)
			return err
		}
		e.cacheArena = arena
	}
	return nil
}

// newScratch lays out the scratch of mp's passes in a buffer of its own,
// off the Go heap (the plan counts it there).
func (e *Engine) newScratch(mp *planner.MemoryPlan) error {
	buf, err := e.alloc(max(mp.ScratchArena, 1))
	if err != nil {
		return fmt.Errorf("scratch for %d rows: %w", mp.Rows, err)
	}
	sc, err := model.NewScratchIn(e.m.Cfg, mp.Rows, mp.Tile, buf)
	if err != nil {
		e.freeBuf(buf)
		return err
	}
	e.sc, e.scratchBuf = sc, buf
	return nil
}

// freeBuf gives back a buffer alloc returned.
func (e *Engine) freeBuf(b []byte) {
	if len(b) == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, x := range e.bufs {
		if xb := x.Bytes(); len(xb) > 0 && unsafe.SliceData(xb) == unsafe.SliceData(b) {
			x.Free()
			e.bufs = append(e.bufs[:i], e.bufs[i+1:]...)
			return
		}
	}
	panic("k3: freeing a buffer the engine did not allocate")
}

// errMoveClosed reports a move interrupted by Close.
var errMoveClosed = errors.New("the model is closing")

// moveContext returns the context moves read under, cancelled by Close.
func moveContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.Background())
	return ctx, func() { cancel(errMoveClosed) }
}
