package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/k3go/k3/internal/engine/cluster"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/model"
)

// SliceFile is the file a rank's slice of a checkpoint (Slice) holds
// beside the shards: which rank it is for, so that no other rank reads
// its holes as weights.
const SliceFile = "k3-slice.json"

// SliceInfo is the content of SliceFile.
type SliceInfo struct {
	Rank        int    `json:"rank"`
	Ranks       int    `json:"ranks"`
	Fingerprint string `json:"fingerprint"`
	// Layout is the cluster.Format of the k3 that cut it: which rows of
	// each matrix a rank holds (3: the KDA matrices in whole heads).
	Layout int `json:"layout"`
	// Bytes is what the slice holds of the shards' data; Total what the
	// whole checkpoint's shards hold.
	Bytes int64 `json:"bytes"`
	Total int64 `json:"total"`
}

// sliceGap is the largest hole between two ranges Slice fills instead of
// leaving: a file system's holes are whole blocks, so a smaller one would
// save nothing.
const sliceGap = 4 << 10

// Slice writes into out a copy of the checkpoint in dir holding only what
// rank of a cluster of ranks reads (model.Plan.RankRanges), every shard
// header and the bytes the content fingerprint samples: each shard is a
// sparse file of its full size whose other bytes are holes, so the copy
// takes the rank's share of the disk and keeps the checkpoint's
// fingerprint. Every other file of dir (config, tokenizer) is copied
// whole, and SliceFile records the rank. out must not exist or be empty;
// dir is only read. progress, if set, hears of the bytes copied.
func Slice(ctx context.Context, dir, out string, rank, ranks int, progress func(done, total int64)) (_ SliceInfo, err error) {
	info := SliceInfo{Rank: rank, Ranks: ranks, Layout: cluster.Format}
	if ranks < 2 || rank < 0 || rank >= ranks {
		return info, fmt.Errorf("k3: slice: %w: rank %d of %d ranks (a cluster has at least 2)", ErrBadOptions, rank, ranks)
	}
	if a, b := absPath(dir), absPath(out); a == b {
		return info, fmt.Errorf("k3: slice: %w: the output directory is the checkpoint directory", ErrBadOptions)
	}
	if ents, err := os.ReadDir(out); err == nil && len(ents) > 0 {
		return info, fmt.Errorf("k3: slice: %w: %s is not empty (nothing in it is replaced)", ErrBadOptions, out)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return info, fmt.Errorf("k3: slice: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, SliceFile)); err == nil {
		return info, fmt.Errorf("k3: slice: %w: %s is itself a rank's slice; slice the whole checkpoint", ErrBadOptions, dir)
	}
	cfg, err := ReadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return info, err
	}
	ck, err := iox.OpenCheckpointContext(ctx, dir)
	if err != nil {
		return info, fmt.Errorf("k3: %w", CheckpointErr(err))
	}
	defer ck.Close()
	plan, err := model.NewPlan(cfg, ck)
	if err != nil {
		return info, fmt.Errorf("k3: %w", CheckpointErr(err))
	}
	if info.Fingerprint, err = ck.Fingerprint(); err != nil {
		return info, fmt.Errorf("k3: %w", err)
	}
	ranges, err := plan.RankRanges(rank, ranks)
	if err != nil {
		return info, fmt.Errorf("k3: slice: %w", err)
	}
	for i, sh := range ck.Shards {
		rs := append(ranges[i], [2]int64{0, sh.Header.DataOff})
		rs = append(rs, iox.FingerprintWindows(sh.Header)...)
		ranges[i] = mergeRanges(rs, sliceGap, sh.Header.FileSize)
		for _, r := range ranges[i] {
			info.Bytes += r[1]
		}
		info.Total += sh.Header.FileSize
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return info, fmt.Errorf("k3: slice: %w", err)
	}
	// out was empty: what is in it from here on is this slice's, and an
	// unfinished slice is removed rather than left to look like a
	// checkpoint. The note goes first, so that even a slice whose removal
	// fails names its rank.
	b, _ := json.MarshalIndent(info, "", "  ")
	if err := writeNew(filepath.Join(out, SliceFile), append(b, '\n')); err != nil {
		return info, fmt.Errorf("k3: slice: %w", err)
	}
	defer func() {
		if err != nil {
			clearDir(out)
		}
	}()
	var done int64
	report := func(n int64) {
		done += n
		if progress != nil {
			progress(done, info.Bytes)
		}
	}
	shard := map[string]int{}
	for i, sh := range ck.Shards {
		shard[sh.Name] = i
	}
	files, err := os.ReadDir(dir)
	if err != nil {
		return info, fmt.Errorf("k3: slice: %w", err)
	}
	for _, f := range files {
		if !f.Type().IsRegular() {
			continue // a packed trunk's directory, say: not the checkpoint's
		}
		name := f.Name()
		src := filepath.Join(dir, name)
		var rs [][2]int64
		size := int64(-1)
		if i, ok := shard[name]; ok {
			rs, size = ranges[i], ck.Shards[i].Header.FileSize
		}
		if err = copyRanges(ctx, src, filepath.Join(out, name), rs, size, report); err != nil {
			return info, fmt.Errorf("k3: slice: %s: %w", name, err)
		}
	}
	return info, nil
}

// clearDir removes everything in dir, the note of the slice last.
func clearDir(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != SliceFile {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	os.Remove(filepath.Join(dir, SliceFile))
}

// mergeRanges sorts (offset, length) ranges, clips them to size and joins
// those that overlap or lie at most gap apart.
func mergeRanges(rs [][2]int64, gap, size int64) [][2]int64 {
	slices.SortFunc(rs, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	var out [][2]int64
	for _, r := range rs {
		lo, hi := max(r[0], 0), min(r[0]+r[1], size)
		if hi <= lo {
			continue
		}
		if n := len(out); n > 0 && lo <= out[n-1][0]+out[n-1][1]+gap {
			out[n-1][1] = max(out[n-1][1], hi-out[n-1][0])
			continue
		}
		out = append(out, [2]int64{lo, hi - lo})
	}
	return out
}

// copyRanges copies src to dst: with size < 0 the whole file; else a file
// of size bytes holding src's bytes in ranges and holes elsewhere. dst is
// written under a temporary name, synced and renamed.
func copyRanges(ctx context.Context, src, dst string, ranges [][2]int64, size int64, report func(int64)) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp")
	o, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if o != nil {
			o.Close()
			os.Remove(tmp)
		}
	}()
	if size < 0 {
		st, err := in.Stat()
		if err != nil {
			return err
		}
		size, ranges = st.Size(), [][2]int64{{0, st.Size()}}
	}
	if err := o.Truncate(size); err != nil {
		return err
	}
	buf := make([]byte, 8<<20)
	for _, r := range ranges {
		for off, end := r[0], r[0]+r[1]; off < end; {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := int(min(int64(len(buf)), end-off))
			if _, err := io.ReadFull(io.NewSectionReader(in, off, int64(n)), buf[:n]); err != nil {
				return fmt.Errorf("reading bytes %d-%d: %w", off, off+int64(n), err)
			}
			if _, err := o.WriteAt(buf[:n], off); err != nil {
				return err
			}
			off += int64(n)
			report(int64(n))
		}
	}
	if err := o.Sync(); err != nil {
		return err
	}
	if err := o.Close(); err != nil {
		o = nil
		os.Remove(tmp)
		return err
	}
	o = nil
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// writeNew writes b to a new file path (an existing one is an error).
func writeNew(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func absPath(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

// ErrSlice reports a rank's slice of a checkpoint opened by another rank,
// or alone: its holes would be read as weights.
var ErrSlice = errors.New("the checkpoint is another rank's slice")

// checkSlice refuses to run rank of ranks (ranks 1: one process) on the
// checkpoint in dir when dir is a slice made for another rank (Slice).
func checkSlice(dir string, rank, ranks int) error {
	b, err := os.ReadFile(filepath.Join(dir, SliceFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("k3: %w", err)
	}
	var s SliceInfo
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("k3: %s: %w", filepath.Join(dir, SliceFile), err)
	}
	if s.Rank != rank || s.Ranks != ranks {
		what := "one process"
		if ranks > 1 {
			what = fmt.Sprintf("rank %d of %d", rank, ranks)
		}
		return fmt.Errorf("k3: %w: %s holds only what rank %d of %d reads (k3 slice), and this is %s", ErrSlice, dir, s.Rank, s.Ranks, what)
	}
	if s.Layout != cluster.Format {
		// Its holes would be read as the rows this k3's ranks hold.
		return fmt.Errorf("k3: %w: %s was cut for ranks that hold other rows of the matrices (layout %d; this k3's is %d): run k3 slice again", ErrSlice, dir, s.Layout, cluster.Format)
	}
	return nil
}
