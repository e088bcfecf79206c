package batchjob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"
)

// Run sends every selected request of opts.Input that opts.Output does not
// hold yet to h, at most opts.Concurrency at once, and appends a result
// line for each. It returns when all are written, when ctx ends (the
// results of requests still in flight are dropped, so a rerun sends them
// again) or when writing the output fails.
func Run(ctx context.Context, h http.Handler, opts Options) (Summary, error) {
	start := time.Now()
	o := opts.withDefaults()
	var sum Summary
	if err := o.check(); err != nil {
		return sum, err
	}
	in, err := os.Open(o.Input)
	if err != nil {
		return sum, fmt.Errorf("input: %w", err)
	}
	defer in.Close()
	if err := sameFile(in, o.Output); err != nil {
		return sum, err
	}
	j, done, truncated, err := openJournal(o.Output, o.SyncEvery, o.writeLine)
	if err != nil {
		return sum, err
	}
	sum.Truncated = truncated
	pending, err := survey(in, &o, done, &sum)
	if err != nil {
		j.close()
		return sum, err
	}
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		j.close()
		return sum, fmt.Errorf("input: %w: it is read twice, so it must be a regular file (%v)", ErrBadInput, err)
	}
	var rep *reporter
	if o.Progress != nil {
		rep = newReporter(o.Progress, o.ProgressTerminal, o.ProgressEvery, sum.Skipped, pending, o.ProgressDetail)
	}
	err = dispatch(ctx, h, in, &o, done, j, rep, &sum)
	if rep != nil {
		rep.finish()
	}
	if cerr := j.close(); err == nil {
		err = cerr
	}
	sum.Elapsed = time.Since(start)
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("interrupted with %d of %d requests written (rerun with the same output to resume): %w",
			sum.Skipped+sum.Written, sum.Selected, context.Cause(ctx))
	}
	return sum, err
}

func (o *Options) check() error {
	switch {
	case o.Input == "" || o.Output == "":
		return fmt.Errorf("%w: an input and an output file are required", ErrBadOptions)
	case o.Shards < 1 || o.Shard < 0 || o.Shard >= o.Shards:
		return fmt.Errorf("%w: shard %d/%d: want 0 <= shard < shards", ErrBadOptions, o.Shard, o.Shards)
	case o.Concurrency < 1 || o.MaxLineBytes < 1 || o.MaxResponseBytes < 1 || o.SyncEvery < 0 || o.ProgressEvery < 0:
		return fmt.Errorf("%w: concurrency, line and response limits must be positive", ErrBadOptions)
	}
	return nil
}

// sameFile refuses an output that is the input file.
func sameFile(in *os.File, output string) error {
	ist, err := in.Stat()
	if err != nil {
		return fmt.Errorf("input: %w", err)
	}
	if ost, err := os.Stat(output); err == nil && os.SameFile(ist, ost) {
		return fmt.Errorf("%w: the output is the input file", ErrBadOptions)
	}
	return nil
}

// survey reads the whole input once: it refuses duplicate custom_ids (as
// OpenAI's Batch API refuses such a file), counts the lines and this
// shard's requests, and returns how many of those the output lacks.
func survey(in io.Reader, o *Options, done map[string]struct{}, sum *Summary) (pending int, err error) {
	first := make(map[string]int) // custom_id -> 0-based line
	lr := newLineReader(in, o.MaxLineBytes)
	matched := 0
	for i := 0; ; i++ {
		b, tooLong, err := lr.next()
		if errors.Is(err, io.EOF) {
			sum.Lines = i
			break
		}
		if err != nil {
			return 0, fmt.Errorf("input line %d: %w", i+1, err)
		}
		if !tooLong && isBlank(b) {
			continue
		}
		r := &request{line: i}
		if !tooLong {
			r.customID = lineCustomID(b)
		}
		if r.customID != "" {
			if j, dup := first[r.customID]; dup {
				return 0, fmt.Errorf("%w: input line %d has custom_id %q, like line %d: custom_ids must be unique",
					ErrBadInput, i+1, r.customID, j+1)
			}
			first[r.customID] = i
		}
		if i%o.Shards != o.Shard {
			continue
		}
		sum.Selected++
		if _, ok := done[r.key()]; ok {
			matched++
		}
	}
	sum.Skipped = matched
	sum.Foreign = len(done) - matched
	return sum.Selected - matched, nil
}

// dispatch reads the input again and sends this shard's pending requests.
func dispatch(ctx context.Context, h http.Handler, in io.Reader, o *Options, done map[string]struct{}, j *journal, rep *reporter, sum *Summary) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	results := make(chan outcome, o.Concurrency)
	var werr error
	wdone := make(chan struct{})
	go func() { // the one writer: lines reach the file whole and in turn
		defer close(wdone)
		// A line written just before a long quiet spell is synced too, not
		// only at the next append.
		tick := time.NewTicker(o.SyncEvery)
		defer tick.Stop()
		for {
			var r outcome
			select {
			case <-tick.C:
				if werr == nil && time.Since(j.lastSync) >= j.syncEvery {
					if werr = j.sync(); werr != nil {
						cancel(werr)
					}
				}
				continue
			case next, ok := <-results:
				if !ok {
					return
				}
				r = next
			}
			if werr != nil {
				continue
			}
			if werr = j.append(r.line); werr != nil {
				cancel(werr)
				continue
			}
			sum.Written++
			sum.CompletionTokens += r.tokens
			if r.failed {
				sum.Failed++
			}
			if rep != nil {
				rep.add(r)
			}
		}
	}()

	slots := make(chan struct{}, o.Concurrency)
	ahead := make(chan struct{}, 8*o.Concurrency)
	gates := make(map[string]chan struct{}) // a header's first request: closed when it is done
	var wg sync.WaitGroup
	var rerr error
	lr := newLineReader(in, o.MaxLineBytes)
read:
	for i := 0; ctx.Err() == nil; i++ {
		b, tooLong, err := lr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			rerr = fmt.Errorf("input line %d: %w", i+1, err)
			break
		}
		if i%o.Shards != o.Shard || (!tooLong && isBlank(b)) {
			continue
		}
		r := parseRequest(i, b, tooLong, o.URLs, o.MaxLineBytes)
		if _, ok := done[r.key()]; ok {
			continue
		}
		if r.fail != nil { // nothing to send: its error line goes straight out
			out, err := serve(ctx, h, r, o.MaxResponseBytes)
			if err != nil {
				rerr = err
				break
			}
			results <- out
			continue
		}
		// A request whose header an earlier request of this run shares
		// waits for that one to finish (GroupPrefixes); it holds no slot
		// meanwhile, and at most 8 × Concurrency requests are read ahead.
		var wait <-chan struct{}
		var lead chan struct{}
		if o.GroupPrefixes {
			if k := r.groupKey(); k != "" {
				if g, ok := gates[k]; ok {
					wait = g
				} else {
					lead = make(chan struct{})
					gates[k] = lead
				}
			}
		}
		select {
		case ahead <- struct{}{}:
		case <-ctx.Done():
			break read
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-ahead }()
			if lead != nil {
				defer close(lead)
			}
			if wait != nil {
				select {
				case <-wait:
				case <-ctx.Done():
					return
				}
			}
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-slots }()
			out, err := serve(ctx, h, r, o.MaxResponseBytes)
			if ctx.Err() != nil {
				return // the answer may be the cancellation's: the rerun sends it again
			}
			if err != nil {
				cancel(err)
				return
			}
			results <- out
		}()
	}
	wg.Wait()
	close(results)
	<-wdone
	switch {
	case werr != nil:
		return werr
	case rerr != nil:
		return rerr
	}
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
