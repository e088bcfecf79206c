package k3

import "github.com/k3go/k3/internal/engine"

// PrefixCacheOptions configure the prefix cache (Options.PrefixCache).
//
// Agents and batch jobs resend the same long header (system prompt, tool
// schemas, the conversation so far) with every request, and prefilling it
// is most of their cost. With the cache, a prompt is cut into blocks of
// BlockTokens tokens, named by a hash chain over the tokens and the
// checkpoint's content fingerprint; the model's attention cache is stored
// once per block, and its recurrent state at sparse checkpoints (every
// CheckpointBlocks blocks), at the end of every prompt, with that
// position's logits, at the end of every generated reply (a conversation's
// next turn resends it), and where a prompt branches from one stored
// before (a header whose tail changed: the next prompt that branches there
// restores every shared block). A later step that feeds a sequence sharing a prefix
// with an earlier one (in this process, or in another one using the same
// directory) restores the longest stored point at or before the shared
// prefix and prefills only the rest; a prompt stored whole needs no pass
// at all. The restored state is bit for bit what the prefill would have
// computed, so the logits and tokens are exactly those of a cold run.
//
// Entries live in RAM (counted in the budget) and in a directory, bounded
// in bytes; eviction keeps what saves the most reads per byte. Files are
// written to a temporary name, synced and renamed, and carry checksums: a
// torn, corrupt, truncated or foreign entry is removed, never restored. A
// directory that cannot be written gives one warning; the cache then keeps
// to RAM. Session.CachedTokens tells how many of a step's tokens were
// restored, Stats the cache's counters.
//
// Only steps that feed two tokens or more (a prompt) look the cache up
// and save to it; a fresh session's step restores, any session's step
// saves. Session.Logits (every position's logits) does not use it.
type PrefixCacheOptions struct {
	// RAMBytes is the RAM tier, inside Options.RAMBudget; zero lets the
	// planner choose (an eighth of the budget above its floor; none
	// without a budget); negative: no RAM tier.
	RAMBytes int64
	// Dir is the disk tier's directory; empty means k3/prefix under the
	// user's cache directory (os.UserCacheDir).
	Dir string
	// DiskBytes bounds the disk tier; zero means 32 GiB; negative: no
	// disk tier.
	DiskBytes int64
	// BlockTokens is the block of the hash chain; zero means 256.
	BlockTokens int
	// CheckpointBlocks is the distance, in blocks, between the recurrent
	// state checkpoints a prefill keeps (besides the end of every
	// prompt); a prompt whose text changes at some token reuses
	// everything up to the last checkpoint before it. Zero chooses it
	// from the model's sizes: a checkpoint costs about what eight blocks
	// hold, and is at least one pass of rows apart.
	CheckpointBlocks int
}

func (o *PrefixCacheOptions) engineOptions() *engine.PrefixOptions {
	if o == nil {
		return nil
	}
	return &engine.PrefixOptions{RAMBytes: o.RAMBytes, Dir: o.Dir, DiskBytes: o.DiskBytes, BlockTokens: o.BlockTokens, CheckpointBlocks: o.CheckpointBlocks}
}

// CachedTokens returns how many tokens of the session's last prompt (a
// Step of two tokens or more, the prompt of Generate) were restored from
// the prefix cache instead of being computed (Options.PrefixCache).
func (s *Session) CachedTokens() int { return s.s.Reused() }
