// Package iox reads huge checkpoint files fast and predictably: the
// safetensors container (one file, or shards with
// model.safetensors.index.json, as [Checkpoint]) and, for the engine, fast
// parallel reads of large byte ranges.
//
// It is the storage layer under k3: the checkpoint (1.56 TB) never fits in
// RAM, so the trunk and the routed experts are streamed from disk every token,
// and disk bandwidth is the wall. iox provides:
//
//   - [Source]: an [io.ReaderAt] with a size and a name. Anything can be a
//     Source ([NewSource]); [*File] is the fast path (pread, O_DIRECT).
//   - [OpenFile]: a file with a buffered descriptor and, on request, a second
//     descriptor that bypasses the page cache (O_DIRECT on Linux, F_NOCACHE
//     on macOS; elsewhere reads are buffered); it falls back to buffered
//     reads where the file system refuses, and [File.CheckSize] detects a
//     file that was truncated or rewritten while open.
//   - [AllocAligned]: page- or 2 MiB-aligned buffers mapped outside the Go
//     heap, returned to the OS by [Buffer.Free], counted by [AllocatedBytes].
//   - [Reader]: a pool of workers with many reads in flight, batches sorted
//     and coalesced, large reads split into chunks (and no read call above
//     [MaxReadCall], below 2 GiB as macOS requires), short reads and EINTR
//     retried, errors typed ([*ReadError]), cancellation by context, and exact
//     byte and time accounting ([Stats]).
//   - [ProbeBandwidth]: the device's direct-read bandwidth, for `k3 doctor`
//     and `k3 bench`.
//
// The machine's memory and file systems' free space are package
// internal/platform/sysinfo's (the planner and `k3 doctor` use them). Package
// iox imports nothing else from k3 but that.
//
// # The window layout
//
// O_DIRECT needs the file offset, the length and the destination address
// aligned (iox uses [Align] = 4096 everywhere). A payload [off, off+n) is
// therefore read as its window [off &^ 4095, roundup(off+n, 4096)), and the
// payload lands at Dst[pad : pad+n] with pad = off % 4096 (see [Window]).
// Every [Request] follows this layout, whatever the source and whether the
// read is direct or buffered, so the caller can compute where its bytes are
// before the read starts:
//
//   - len(Dst) must be at least [WindowLen](Off, Len) (at most Len + 8 KiB);
//   - O_DIRECT is used only when Dst's address is [Align]-aligned (use
//     [AllocAligned]); otherwise the read is buffered (counted in
//     [Stats.MisalignedDst]), still at the same pad;
//   - bytes of Dst outside the payload are unspecified after the read: a
//     direct read fills the whole window, a buffered one only the payload
//     (plus gaps between coalesced payloads).
//
// # Buffer lifetime (read this before building a ring)
//
// A read that has started cannot be interrupted: pread into Dst runs to
// completion in a worker even when its request was cancelled or has failed.
// So a [Future] has two signals:
//
//   - [Future.Done] closes when the request is resolved: success, error, or
//     its context cancelled. Cancellation resolves it promptly, with
//     ctx.Err(), while a worker may still be writing into Dst.
//   - [Future.Released] closes when no worker will touch Dst again.
//
// After a success Released is already closed when Done closes. After an
// error or a cancellation, the request's chunks still queued are dropped at
// once and Released closes when its reads already in flight return; until
// then Dst (a ring slot, an expert slot, a [Buffer]) must not be reused and
// its Buffer must not be freed. Released is exact per request, also for
// coalesced requests that share reads and boundary blocks: it waits for
// every read that writes into the request's window.
// [Reader.Close] waits for every read in flight, so after Close returns all
// futures are released. Freeing a [Buffer] that a read still targets is a
// use-after-free outside the Go heap: the process crashes or, worse, another
// slot is silently overwritten.
//
// A worker writes only inside the window of some request (Dst[:WindowLen]),
// never elsewhere in the backing array.
package iox
