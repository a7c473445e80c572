package stagingmmap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/cache"
	"github.com/k3-inference/k3/core/plugin/readq"
)

const page = 4096

func pageDown(n int64) int64 { return n &^ (page - 1) }
func pageUp(n int64) int64   { return (n + page - 1) &^ (page - 1) }

// span is a page-aligned byte range of a shard.
type span struct {
	shard      int
	start, end int64
}

func (s span) size() int64 { return s.end - s.start }

// Stager maps the shards and uses the page cache as the expert cache:
// hints become madvise(WILLNEED), Acquire faults the pages in, and cold
// experts are dropped from the page cache to stay within the budget.
// Locations point straight into the shard files. Construct with New.
type Stager struct {
	req      *plugin.OpenRequest
	opt      options
	files    []*os.File
	maps     [][]byte
	resident []span // always-needed, page-aligned and merged
	resBytes int64
	unitSize int64 // largest unit, for the mode line and Footprint
	routed   map[int][]int
	experts  map[int]int
	locked   string // mlock outcome for the mode line

	mu       sync.Mutex
	unpinned *sync.Cond  // signalled when a prefetch drops its pin
	inflight int         // entries pinned by a prefetch in progress
	holds    cache.Holds // hint-read units pinned until the model reaches their layer
	cache    *cache.Cache
	pins     map[uint64][]*cache.Entry
	// loading holds the units a prefetch is reading, closed when read:
	// an Acquire of one waits for that read instead of counting and
	// faulting the same bytes again.
	loading map[cache.Key]chan struct{}
	// undropped are evicted units whose pages stayed in the page cache
	// because the core still mapped them (its faults on a pinned unit map
	// the cached neighbours too); Release, once the core has let go of its
	// mappings, drops them again.
	undropped map[cache.Key]bool
	stats     plugin.Stats

	queue   *readq.Queue // hinted units to read
	work    *sync.Cond   // signals workers: queue not empty or closing
	closing bool
	wg      sync.WaitGroup
}

// New returns a Stager ready to Open.
func New() *Stager { return &Stager{} }

var _ plugin.Stager = (*Stager)(nil)

// Describe declares Options.
func (s *Stager) Describe(context.Context) (*plugin.StagerInfo, error) {
	return &plugin.StagerInfo{Name: "staging-mmap", Options: Options}, nil
}

// Options are the options staging-mmap declares (Describe). It takes no
// direct_io: mapped reads always go through the page cache.
var Options = []plugin.OptionSpec{
	{Name: "cache_policy", Type: plugin.OptionString, Default: "lfru", Values: []string{"lfru", "lru"}, Doc: "expert-cache eviction policy"},
	{Name: "lfru_half_life", Type: plugin.OptionFloat, Default: "8", Doc: "LFRU frequency half-life in unit lookups, as a multiple of the units that fit"},
	{Name: "mlock", Type: plugin.OptionBool, Default: "false", Doc: "lock the always-needed weights in memory (memory.mlock)"},
	{Name: "evict", Type: plugin.OptionString, Default: "dontneed", Values: []string{"dontneed", "cold"},
		Doc: "how an evicted unit leaves: dontneed (dropped from the page cache) or cold (MADV_COLD: reclaim takes it first)"},
	{Name: "io_workers", Type: plugin.OptionInt, Default: "4", Doc: "goroutines reading hinted units, 1..256"},
}

type options struct {
	policy   string
	halfLife float64
	mlock    bool
	evict    string // "dontneed" (drop from the page cache) or "cold" (MADV_COLD: let reclaim take it first)
	workers  int    // goroutines reading hinted units, one unit each at a time
}

func parseOptions(m map[string]string) (options, error) {
	v, err := plugin.ParseOptions(Options, m)
	if err != nil {
		return options{}, fmt.Errorf("staging-mmap: %w", err)
	}
	o := options{policy: v.String("cache_policy"), halfLife: v.Float("lfru_half_life"), mlock: v.Bool("mlock"), evict: v.String("evict"), workers: v.Int("io_workers")}
	if o.workers < 1 || o.workers > 256 {
		return o, fmt.Errorf("staging-mmap: option io_workers=%d: out of range 1..256", o.workers)
	}
	return o, nil
}

// Footprint is the budget staging-mmap needs for req to cache the given
// number of (layer, expert) units of the largest size.
func Footprint(req *plugin.OpenRequest, units int) (int64, error) {
	res, largest, err := sizes(req)
	return res + int64(units)*largest, err
}

// sizes returns the page-aligned bytes of the always-needed tensors and
// of the largest unit.
func sizes(req *plugin.OpenRequest) (resident, largest int64, err error) {
	var spans []span
	unit := map[int]int64{}
	for _, t := range req.Tensors {
		if err := t.Validate(len(req.Shards)); err != nil {
			return 0, 0, fmt.Errorf("staging-mmap: %w", err)
		}
		if !t.Routed() {
			spans = append(spans, span{t.Shard, pageDown(t.Offset), pageUp(t.Offset + t.Size)})
			continue
		}
		unit[t.Layer] += pageUp(t.ExpertSize) + page // the slice may straddle one more page
	}
	for _, s := range mergeSpans(spans) {
		resident += s.size()
	}
	for _, n := range unit {
		largest = max(largest, n)
	}
	return resident, largest, nil
}

// Open maps the shards, drops whatever of them the page cache holds, reads
// the always-needed tensors in (and locks them with the mlock option).
func (s *Stager) Open(ctx context.Context, req *plugin.OpenRequest) (*plugin.OpenResponse, error) {
	if s.req != nil {
		return nil, errors.New("staging-mmap: already open")
	}
	opt, err := parseOptions(req.Options)
	if err != nil {
		return nil, err
	}
	res, largest, err := sizes(req)
	if err != nil {
		return nil, err
	}
	switch {
	case req.Budget < res:
		return nil, fmt.Errorf("staging-mmap: budget %d bytes is under the always-needed %d bytes", req.Budget, res)
	case req.Budget < res+largest:
		return nil, fmt.Errorf("staging-mmap: budget %d bytes holds the always-needed %d bytes but not one %d-byte expert unit beside them", req.Budget, res, largest)
	}
	policy, err := cache.NewPolicy(opt.policy, opt.halfLife*float64((req.Budget-res)/max(largest, 1)))
	if err != nil {
		return nil, fmt.Errorf("staging-mmap: %w", err)
	}
	s.req, s.opt, s.resBytes, s.unitSize = req, opt, res, largest
	s.cache = cache.New(req.Budget-res, policy)
	s.unpinned = sync.NewCond(&s.mu)
	s.pins = map[uint64][]*cache.Entry{}
	s.loading = map[cache.Key]chan struct{}{}
	s.undropped = map[cache.Key]bool{}
	s.routed, s.experts = map[int][]int{}, map[int]int{}
	s.stats.BudgetBytes = req.Budget
	var spans []span
	for id, t := range req.Tensors {
		if t.Routed() {
			s.routed[t.Layer] = append(s.routed[t.Layer], id)
			s.experts[t.Layer] = max(s.experts[t.Layer], t.Experts)
		} else {
			spans = append(spans, span{t.Shard, pageDown(t.Offset), pageUp(t.Offset + t.Size)})
		}
	}
	s.resident = mergeSpans(spans)
	if err := s.mapShards(); err != nil {
		s.Close(ctx)
		return nil, err
	}
	s.fetchAll(s.resident)
	s.lockResident()
	s.queue, s.work = readq.New(), sync.NewCond(&s.mu)
	for range opt.workers {
		s.wg.Add(1)
		go s.worker()
	}
	regions := make([]plugin.Region, len(req.Shards))
	for i, p := range req.Shards {
		regions[i] = plugin.Region{Kind: plugin.RegionShard, Path: p, Size: int64(len(s.maps[i]))}
	}
	slog.Info("staging-mmap open", "mode", s.mode())
	return &plugin.OpenResponse{Regions: regions, Mode: s.mode()}, nil
}

func (s *Stager) mapShards() error {
	for _, p := range s.req.Shards {
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("staging-mmap: %w", err)
		}
		s.files = append(s.files, f)
		st, err := f.Stat()
		if err != nil {
			return fmt.Errorf("staging-mmap: %w", err)
		}
		m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return fmt.Errorf("staging-mmap: mmap %s: %w", p, err)
		}
		s.maps = append(s.maps, m)
		// Only what the stager asks for is read: no read-around on faults,
		// no readahead on the descriptor, and a cold start within budget.
		_ = unix.Madvise(m, unix.MADV_RANDOM)
		_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM)
		_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	}
	return nil
}

// lockResident mlocks the always-needed spans when asked; a refusal (e.g.
// RLIMIT_MEMLOCK) is reported, not fatal.
func (s *Stager) lockResident() {
	if !s.opt.mlock {
		s.locked = "off"
		return
	}
	for _, sp := range s.resident {
		if err := unix.Mlock(s.maps[sp.shard][sp.start:min(sp.end, int64(len(s.maps[sp.shard])))]); err != nil {
			s.locked = "failed (" + err.Error() + ")"
			slog.Warn("mlock of always-needed weights failed", "err", err)
			return
		}
	}
	s.locked = "on"
}

func (s *Stager) mode() string {
	return fmt.Sprintf("mmap workers=%d policy=%s evict=%s mlock=%s unit=%dKiB resident=%dMiB",
		s.opt.workers, s.opt.policy, s.opt.evict, s.locked, s.unitSize>>10, s.resBytes>>20)
}

// Stats reports counters; ResidentBytes is what mincore says the page
// cache holds of the shards.
func (s *Stager) Stats(context.Context) (*plugin.Stats, error) {
	if s.req == nil {
		return nil, errors.New("staging-mmap: not open")
	}
	var resident int64
	for _, m := range s.maps {
		resident += residentBytes(m)
	}
	s.mu.Lock()
	st := s.stats
	st.Evictions = s.cache.Evictions()
	s.mu.Unlock()
	st.ResidentBytes = resident
	st.Mode = s.mode()
	return &st, nil
}

// Close unmaps the shards. It leaves the page cache as it is.
func (s *Stager) Close(context.Context) error {
	if s.work != nil {
		s.mu.Lock()
		s.closing = true
		s.work.Broadcast()
		s.mu.Unlock()
		s.wg.Wait()
		s.work = nil
	}
	var err error
	for _, m := range s.maps {
		if s.locked == "on" {
			// Unlock before unmapping: pages left on the unevictable list
			// would resist the next Open's FADV_DONTNEED.
			_ = unix.Munlock(m)
		}
		err = errors.Join(err, unix.Munmap(m))
	}
	for _, f := range s.files {
		f.Close()
	}
	s.maps, s.files = nil, nil
	return err
}
