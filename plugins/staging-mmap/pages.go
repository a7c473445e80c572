package stagingmmap

import (
	"sort"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mergeSpans sorts spans and merges overlapping or touching ones, so
// pages shared by neighbouring tensors are counted once.
func mergeSpans(spans []span) []span {
	sort.Slice(spans, func(i, j int) bool {
		if spans[i].shard != spans[j].shard {
			return spans[i].shard < spans[j].shard
		}
		return spans[i].start < spans[j].start
	})
	var out []span
	for _, s := range spans {
		if n := len(out); n > 0 && out[n-1].shard == s.shard && s.start <= out[n-1].end {
			out[n-1].end = max(out[n-1].end, s.end)
			continue
		}
		out = append(out, s)
	}
	return out
}

// residentBytes counts the pages of m that are in the page cache, in 1 GiB
// chunks so the mincore vector stays small for terabyte-sized shards.
func residentBytes(m []byte) int64 {
	const chunk = 1 << 30
	var n int64
	vec := make([]byte, min(chunk, len(m)+page)/page)
	for off := 0; off < len(m); off += chunk {
		part := m[off:min(off+chunk, len(m))]
		v := vec[:(len(part)+page-1)/page]
		if err := mincore(part, v); err != nil {
			continue
		}
		for _, b := range v {
			if b&1 != 0 {
				n += page
			}
		}
	}
	return n
}

// view is the mapped bytes of sp, clipped to the file.
func (s *Stager) view(sp span) []byte {
	m := s.maps[sp.shard]
	return m[min(sp.start, int64(len(m))):min(sp.end, int64(len(m)))]
}

// missing counts the bytes of sp not in the page cache.
func (s *Stager) missing(sp span) int64 {
	v := s.view(sp)
	return int64(len(v)) - residentBytes(v)
}

// touchSink keeps the page touches from being optimized away.
var touchSink atomic.Uint32

// fetchAll brings the spans into the page cache and returns once they are
// there, counting the bytes that had to be read; it returns how long it
// waited (0 if nothing was missing). Every read is started (WILLNEED)
// before the first wait, so the device sees them all at once.
func (s *Stager) fetchAll(spans []span) time.Duration {
	var bytes int64
	var reads uint64
	var missing []span
	for _, sp := range spans {
		if miss := s.missing(sp); miss > 0 {
			missing = append(missing, sp)
			bytes += miss
			reads++
		}
	}
	if reads == 0 {
		return 0
	}
	start := time.Now()
	for _, sp := range missing {
		_ = madviseWillNeed(s.view(sp))
	}
	var x byte
	for _, sp := range missing {
		v := s.view(sp)
		for off := 0; off < len(v); off += page {
			x += v[off]
		}
	}
	touchSink.Add(uint32(x))
	d := time.Since(start)
	s.mu.Lock()
	s.stats.Reads += reads
	s.stats.BytesRead += bytes
	s.stats.ReadTime += d
	s.mu.Unlock()
	return d
}

// drop takes sp out of this process's mapping and, with the dontneed
// policy, out of the page cache (pages another mapping holds stay). Pages
// it shares with always-needed tensors stay: dropping them would cost a
// re-read, and with mlock the kernel refuses the whole range. It reports
// whether pages it should have dropped stayed cached.
func (s *Stager) drop(sp span) (left bool) {
	for _, part := range subtract(sp, s.resident) {
		s.dropSpan(part)
		if s.opt.evict == "dontneed" && residentBytes(s.view(part)) > 0 {
			left = true
		}
	}
	return left
}

// subtract returns the parts of sp outside the sorted, merged spans.
func subtract(sp span, spans []span) []span {
	out := []span{sp}
	for _, r := range spans {
		if r.shard != sp.shard || r.end <= sp.start || r.start >= sp.end {
			continue
		}
		var next []span
		for _, o := range out {
			if r.end <= o.start || r.start >= o.end {
				next = append(next, o)
				continue
			}
			if o.start < r.start {
				next = append(next, span{o.shard, o.start, r.start})
			}
			if r.end < o.end {
				next = append(next, span{o.shard, r.end, o.end})
			}
		}
		out = next
	}
	return out
}

func (s *Stager) dropSpan(sp span) {
	v := s.view(sp)
	if len(v) == 0 {
		return
	}
	if s.opt.evict == "cold" {
		_ = unix.Madvise(v, unix.MADV_COLD)
		return
	}
	_ = unix.Madvise(v, unix.MADV_DONTNEED)
	_ = unix.Fadvise(int(s.files[sp.shard].Fd()), sp.start, int64(len(v)), unix.FADV_DONTNEED)
}

func madviseWillNeed(v []byte) error {
	if len(v) == 0 {
		return nil
	}
	return unix.Madvise(v, unix.MADV_WILLNEED)
}

// mincore fills vec with one byte per page of m whose low bit says the
// page is in the page cache. x/sys/unix has no wrapper for it.
func mincore(m, vec []byte) error {
	if len(m) == 0 {
		return nil
	}
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return errno
	}
	return nil
}
