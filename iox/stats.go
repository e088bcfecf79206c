package iox

import (
	"sync"
	"sync/atomic"
	"time"
)

// Stats is a snapshot of a [Reader]'s counters since it was created. Take
// two and [Stats.Sub] them for one step. Counters are updated atomically;
// a snapshot is consistent per field, not across fields taken mid-read.
type Stats struct {
	Requests       int64 // requests submitted (valid or not)
	Completed      int64 // requests resolved successfully
	Failed         int64 // requests resolved with an error other than cancellation or close
	Canceled       int64 // requests resolved by their context or by Close
	Coalesced      int64 // requests merged into a neighbour's read (saved extents)
	BytesRequested int64 // payload bytes of valid requests

	Chunks        int64 // chunk jobs run (a read of up to ChunkSize bytes, retries included)
	Skipped       int64 // chunk jobs dropped unread because every request they served was resolved
	Reads         int64 // read calls issued (pread or ReadAt), retries included
	DirectReads   int64 // of which on an O_DIRECT descriptor
	BytesRead     int64 // bytes returned by those calls: payload + alignment padding + re-reads
	BytesDirect   int64 // of which by O_DIRECT reads
	Retries       int64 // reads repeated after EINTR, EAGAIN or a short read
	MisalignedDst int64 // chunks read buffered from a direct file because Dst was not Align-aligned
	Fallbacks     int64 // files switched from O_DIRECT to buffered by a refused read (EINVAL)

	// ReadTime is the time spent in chunk reads, summed over workers (two
	// reads of 1 s in parallel count 2 s).
	ReadTime time.Duration
	// BusyTime is the wall time during which at least one read was in flight:
	// the I/O side of an I/O-versus-compute overlap report. BytesRead /
	// BusyTime is the achieved device bandwidth.
	BusyTime time.Duration
	// InFlight is the number of chunk reads in flight at the snapshot;
	// MaxInFlight the most seen at once.
	InFlight, MaxInFlight int64
}

// Sub returns the counters accumulated between prev and s (two snapshots of
// the same Reader, prev taken first). InFlight and MaxInFlight are s's.
func (s Stats) Sub(prev Stats) Stats {
	d := s
	d.Requests -= prev.Requests
	d.Completed -= prev.Completed
	d.Failed -= prev.Failed
	d.Canceled -= prev.Canceled
	d.Coalesced -= prev.Coalesced
	d.BytesRequested -= prev.BytesRequested
	d.Chunks -= prev.Chunks
	d.Skipped -= prev.Skipped
	d.Reads -= prev.Reads
	d.DirectReads -= prev.DirectReads
	d.BytesRead -= prev.BytesRead
	d.BytesDirect -= prev.BytesDirect
	d.Retries -= prev.Retries
	d.MisalignedDst -= prev.MisalignedDst
	d.Fallbacks -= prev.Fallbacks
	d.ReadTime -= prev.ReadTime
	d.BusyTime -= prev.BusyTime
	return d
}

// BusyGBps is BytesRead per second of BusyTime, in GB/s (10⁹ bytes): the
// bandwidth the device delivered while it had work.
func (s Stats) BusyGBps() float64 {
	if s.BusyTime <= 0 {
		return 0
	}
	return float64(s.BytesRead) / s.BusyTime.Seconds() / 1e9
}

// readerStats holds the live counters.
type readerStats struct {
	requests, completed, failed, canceled, coalesced, bytesRequested atomic.Int64
	chunks, skipped, reads, directReads, bytesRead, bytesDirect      atomic.Int64
	retries, misaligned, fallbacks                                   atomic.Int64
	readTime                                                         atomic.Int64 // ns

	busyMu    sync.Mutex
	inFlight  int64
	maxFlight int64
	busySince time.Time
	busy      time.Duration
}

// begin marks a chunk read starting; it returns the start time.
func (s *readerStats) begin() time.Time {
	now := time.Now()
	s.busyMu.Lock()
	if s.inFlight == 0 {
		s.busySince = now
	}
	s.inFlight++
	s.maxFlight = max(s.maxFlight, s.inFlight)
	s.busyMu.Unlock()
	return now
}

// end marks a chunk read started at t0 finished.
func (s *readerStats) end(t0 time.Time) {
	now := time.Now()
	s.readTime.Add(int64(now.Sub(t0)))
	s.busyMu.Lock()
	s.inFlight--
	if s.inFlight == 0 {
		s.busy += now.Sub(s.busySince)
	}
	s.busyMu.Unlock()
}

func (s *readerStats) snapshot() Stats {
	st := Stats{
		Requests:       s.requests.Load(),
		Completed:      s.completed.Load(),
		Failed:         s.failed.Load(),
		Canceled:       s.canceled.Load(),
		Coalesced:      s.coalesced.Load(),
		BytesRequested: s.bytesRequested.Load(),
		Chunks:         s.chunks.Load(),
		Skipped:        s.skipped.Load(),
		Reads:          s.reads.Load(),
		DirectReads:    s.directReads.Load(),
		BytesRead:      s.bytesRead.Load(),
		BytesDirect:    s.bytesDirect.Load(),
		Retries:        s.retries.Load(),
		MisalignedDst:  s.misaligned.Load(),
		Fallbacks:      s.fallbacks.Load(),
		ReadTime:       time.Duration(s.readTime.Load()),
	}
	s.busyMu.Lock()
	st.BusyTime = s.busy
	if s.inFlight > 0 {
		st.BusyTime += time.Since(s.busySince)
	}
	st.InFlight, st.MaxInFlight = s.inFlight, s.maxFlight
	s.busyMu.Unlock()
	return st
}
