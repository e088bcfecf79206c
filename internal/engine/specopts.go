package engine

import (
	"github.com/k3go/k3/internal/engine/draft"
	"github.com/k3go/k3/internal/engine/specpolicy"
)

// SpeculateAuto, as Options.Speculate or GenOptions.Speculate, lets the
// engine choose every pass how many drafted tokens each sequence verifies
// (internal/engine/specpolicy), zero included.
const SpeculateAuto = -1

// AutoDraft is the most drafted tokens a sequence verifies in one pass
// under SpeculateAuto: the rows its rollback buffer records.
const AutoDraft = 8

// MaxSpeculate is the most drafted tokens a step verifies.
const MaxSpeculate = specpolicy.MaxDraft

// SharedIndexTokens is the capacity of the process's index of recent
// outputs (draft.Index): a million tokens, 12 MiB, a few hundred agent
// turns.
const SharedIndexTokens = 1 << 20

// IndexLead is how many tokens before a generation's output go into the
// shared index with it: a later sequence whose suffix ends like the
// prompt did matches into the output from its first token.
const IndexLead = 16

// autoSpecSlots is how many sequences may speculate in one pass under
// SpeculateAuto, each with a rollback buffer (a copy of its recurrent
// state, 0.46 GB at the released widths): one per four sessions, at least
// one. A pass of many sequences gains little from drafts (the trunk is
// shared already, every row adds experts), so the policy grants them to
// the likeliest few; a fixed draft length (Speculate > 0) reserves one
// per session, as every sequence then speculates.
func autoSpecSlots(sessions int) int { return max(1, sessions/4) }

// specRequest resolves Options.Speculate for the planner: the most drafts
// per pass, the rollback buffers, the drafter's tables (a matcher per
// session over MaxContext tokens, the shared index), and whether they are
// optional (SpeculateAuto: a budget too small for them plans without, and
// auto then decodes plainly).
func specRequest(opts Options) (maxDraft, slots int, drafter int64, auto bool) {
	sessions := max(opts.Sessions, 1)
	switch {
	case opts.Speculate == SpeculateAuto:
		maxDraft, slots, auto = AutoDraft, autoSpecSlots(sessions), true
	case opts.Speculate > 0:
		maxDraft, slots = opts.Speculate, sessions
	default:
		return 0, 0, 0, false
	}
	drafter = int64(sessions)*specpolicy.Bytes(opts.MaxContext) + draft.IndexBytes(SharedIndexTokens)
	return maxDraft, slots, drafter, auto
}
