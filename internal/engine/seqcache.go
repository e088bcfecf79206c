package engine

import (
	"context"
	"fmt"

	"github.com/k3go/k3/model"
)

// stepCached is Step with the prefix cache: a fresh sequence first takes
// the longest cached prefix of its tokens (and, for a prompt cached whole
// with its logits, needs no forward at all); then the rest is prefilled,
// stopping at every checkpoint position (every pc.every blocks of the
// sequence) to save the state there, and at the end the new blocks and
// the final state, with its logits, are saved. When the prompt shares
// more blocks with an earlier one than any state covers (it branches from
// it: a header whose tail changed, a conversation edited), the prefill
// also stops at the branch point and saves the state there, so that the
// next prompt that shares those blocks restores them all; this costs at
// most one narrower pass, once per branch point. A step that ends early (its
// context, or a failed pass) saves what is consistent: the blocks and
// checkpoints already saved stay, and the state where a cancelled step
// stopped between passes, so a retry resumes there.
func (s *Seq) stepCached(ctx context.Context, pc *prefixCache, tokens []int) ([]float32, error) {
	if err := s.usable("Step"); err != nil {
		return nil, err
	}
	if s.broken {
		return nil, fmt.Errorf("k3: session unusable after a failed step; call Reset")
	}
	V := s.e.m.Cfg.Vocab
	for i, t := range tokens {
		if t < 0 || t >= V {
			return nil, fmt.Errorf("k3: %w: token %d at index %d is outside [0, %d)", model.ErrTokenOutOfRange, t, i, V)
		}
	}
	// The sequence as it will stand: what the state holds, the pending
	// tokens, the new ones. The pending tokens become ordinary tokens of
	// the feed below; if the step fails, those not fed are pending again.
	held := len(s.tokens)
	pending := append([]int(nil), s.pending...)
	full := append(append(append(make([]int, 0, held+len(pending)+len(tokens)), s.tokens...), pending...), tokens...)
	if len(full) > s.e.opts.MaxContext {
		return nil, fmt.Errorf("k3: %w: %d + %d tokens exceed MaxContext %d", model.ErrContextFull, held, len(full)-held, s.e.opts.MaxContext)
	}
	p := pc.store.Prompt(full)
	out := s.logits[:V]
	done := held
	branch := 0 // where the prompt leaves the blocks an earlier one cached
	if held == 0 {
		st, err := s.state()
		if err != nil {
			return nil, err
		}
		n, whole, shared := pc.restore(st, p, len(full), out)
		branch = shared
		if n > 0 {
			s.tokens = append(s.tokens[:0], full[:n]...)
			s.pending = s.pending[:0]
			s.reused = n
			done = n
			if whole {
				s.replyFrom = len(s.tokens)
				return out, nil
			}
		}
	}
	s.pending = s.pending[:0]
	restorePending := func() {
		// Pending tokens the state does not hold yet stay pending.
		if fed := len(s.tokens) - held; fed < len(pending) {
			s.pending = append(s.pending[:0], pending[max(fed, 0):]...)
		}
	}
	step := pc.every * pc.b
	for done < len(full) {
		end := len(full)
		if next := (done/step + 1) * step; next < end {
			end = next
		}
		if branch > done && branch < end {
			end = branch
		}
		// The rest of the prompt follows this step at once: the batcher
		// keeps a wide pass for it between the steps (0 at the last).
		s.req.ahead.Store(int64(len(full) - end))
		if err := s.forward(ctx, full[done:end], out, false); err != nil {
			s.req.ahead.Store(0)
			if !s.broken && len(s.tokens) > done {
				// Stopped between passes: the state is that of its tokens.
				pc.save(s.st, p, done, len(s.tokens), nil)
			}
			restorePending()
			return nil, err
		}
		pc.save(s.st, p, done, end, out)
		done = end
	}
	s.replyFrom = len(s.tokens)
	return out, nil
}
