// Package prefix stores and finds the model state of prompt prefixes, so a
// prompt that shares a prefix with an earlier one is prefilled only from
// the point where it differs. It knows nothing of models: payloads are
// opaque bytes that the engine streams in and out, described by a small
// [Meta]. It has three parts: the keys ([Hasher], [Prompt]), the lookup
// ([Lookup]) and a two-tier store ([Store]: RAM and a directory).
//
// # Keys
//
// A prompt is cut into blocks of B tokens. Its chain is
//
//	h_0     = SHA-256("k3/prefix/seed\0" ‖ FormatVersion ‖ B ‖ len(fp) ‖ fp)
//	h_{i+1} = SHA-256("k3/prefix/block\0" ‖ h_i ‖ tokens of block i)
//
// where fp is the model's content fingerprint (plus the engine's payload
// layout version, if any) and tokens are encoded as little-endian int64s.
// h_{i+1} names everything before position (i+1)·B, so it is the key of
// block entry i. A state entry at position p is keyed by
//
//	k(p) = SHA-256("k3/prefix/state\0" ‖ h_⌊p/B⌋ ‖ tokens [⌊p/B⌋·B, p))
//
// The tags keep the three kinds apart (k(iB) and h_{i+1} hash the same
// anchor, behind different tags). Token ids have a fixed width, so a tail's
// length is implied by the hash input's length. Entries of another
// fingerprint, block size or format version get other keys: they can never
// be found, and on disk they also fail the header check (below).
//
// # What is stored
//
//   - Block entries (KindBlock), keyed by h_{i+1}: the attention cache of
//     positions [iB, (i+1)B). Immutable and shared by every prompt with that
//     prefix.
//   - State entries (KindState) at a position p ≥ 1: the recurrent state at
//     p, the attention cache of the tail [⌊p/B⌋·B, p), optionally the last
//     position's logits. They are indexed by their anchor h_⌊p/B⌋, with
//     their tail length, so that a state saved at the end of a prompt (not
//     block-aligned, possibly shorter than one block) is found again.
//
// # Lookup
//
// [Lookup] finds the largest p such that a state entry at p matches the
// prompt's tokens and every full block before ⌊p/B⌋·B is present. It walks
// the leading present blocks, then the anchors from the highest usable one
// down, and hashes each anchor's tails incrementally (SHA-256's Sum does
// not disturb its state, so all tail lengths at one anchor cost one pass).
// A prompt whose header changed at token 1,900 still matches every state at
// or before its last unchanged position; a conversation's next turn matches
// the state saved at the end of the previous prompt. A state at p = n (the
// whole prompt) is usable only if it holds the logits.
//
// # Tiers and eviction
//
// The RAM tier holds payloads in buffers from Options.Alloc (the engine
// gives it off-heap memory counted in its RAM budget); the disk tier holds
// one file per entry in Dir/<fingerprint id>-b<B>/, bounded in bytes. A Put
// goes to RAM when it fits there, and a background writer then copies it
// to disk (write-behind: the session that saved it is not delayed by the
// disk, and the entry outlives the process); an entry the RAM tier cannot
// take is written to disk at once. A disk hit is copied into RAM as it is
// read (promotion), when RAM has room.
//
// Each tier evicts by GreedyDual-Size (Cao and Irani, 1997): an entry's
// priority is L + saves/size, where saves is what the engine says a hit
// avoids reading (Meta.Saves) and size is the bytes it holds in the tier;
// a hit renews it with the current L; the victim is the lowest priority
// (ties: least recently used), and L rises to the victim's priority, so
// entries that are not used age relative to new ones. This keeps what
// saves the most bytes of reads per byte held. A RAM copy is never evicted
// while a Reader reads it or before the write-behind has tried to write
// it, so eviction from RAM loses nothing the disk does not have (unless
// that write failed, or the disk tier has since evicted its copy for
// something worth more).
//
// # File format
//
// An entry file is a header in a fixed 4 KiB region, then the payload (so
// the payload is page-aligned). The header holds a magic, the format
// version, the fingerprint id, the key, the kind, the flags, the tail, the
// anchor, the position, Saves, the payload length, the payload's CRC-32C,
// B, the section lengths and, last, a CRC-32C of the header itself. An
// entry is used only if the magic, the version, the header checksum, the
// fingerprint, the key (against the file name), B, the file length
// (against the declared payload length) and the zero padding all agree, so
// every byte of the file is checked; the payload checksum is
// verified as the payload is read, at its end ([Reader.Read],
// [Reader.Close]). Anything else (a torn, truncated, zero-length or
// flipped file, another fingerprint, an older format) is removed and never
// restored; a file of a newer format is left for the newer build that
// shares the directory.
//
// # Crash safety and sharing
//
// A file is written as a temporary file (.tmp-…, unique name, created
// exclusively), payload first, header with both checksums last, then
// fsync'd, renamed over its final name, and the directory fsync'd. A rename
// is atomic, so a reader, in this process or another, sees no file or a
// complete one: a writer killed at any point leaves at most a temporary
// file, which no reader opens. The writer holds an flock on its temporary
// file until after the rename; a cleaner (at Open, and at each rescan)
// removes a temporary file only while holding that lock and only if the
// name still names the locked file, so it removes only files whose writer
// is dead, and a writer that loses that race notices (the lock fails or the
// name no longer names its file) and starts over. Two stores writing one
// key both write complete files; the last rename wins, and an open Reader
// keeps the inode it opened. Eviction by another process is seen as a
// missing file. A Lookup rescans the directory when its modification time
// changed, so entries written by another process are found.
//
// A directory that cannot be created or written makes the store log one
// warning and run without its disk tier; so does a later permission or
// read-only error. A full disk (ENOSPC, or the size bound) evicts and goes
// on.
//
// # Use
//
// See the package example. Per request: Prompt, Lookup, then Get each
// block entry 0 … Anchor−1 and the state entry, reading each payload to
// its end and checking Reader.Close (nil means verified). After a
// prefill: Put the new blocks and the states the engine chooses (sparse
// boundaries, the prompt's end), streaming each payload from the engine's
// buffers. Meta.Saves should be the bytes of reads that a hit on the entry
// lets the engine skip (the prefill reads of the positions it restores);
// it only ranks entries for eviction.
//
// Any Get may fail: another session or process may have evicted the entry
// since the lookup, or it may be corrupt (then it is removed). The engine
// discards what it restored and prefills from the start, or looks up
// again.
package prefix
