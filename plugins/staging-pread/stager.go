package stagingpread

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/cache"
)

// Stager keeps always-needed weights and a budgeted cache of routed experts
// in one shared-memory file, filled by aligned preads. Construct it with
// New; it implements plugin.Stager.
type Stager struct {
	req    *plugin.OpenRequest
	opt    options
	lay    *layout
	rd     *reader
	file   *os.File
	mem    []byte
	slots  int
	region plugin.Region

	mu       sync.Mutex
	cache    *cache.Cache
	free     []int                     // unused slot indexes
	pins     map[uint64][]*cache.Entry // by step
	devs     []*device                 // shard groups, each with its read queue and workers
	shardDev []int                     // shard → index into devs
	unitDev  map[int]*device           // layer → the group its units are read through
	loaded   *sync.Cond                // signals waiters: a load finished, pins may have dropped
	inflight int                       // entries pinned only by their read
	holds    cache.Holds               // hint-read units pinned until the model reaches their layer
	closing  bool
	closed   chan struct{} // closed by Close, to wake blocked Acquires
	wg       sync.WaitGroup
	stats    plugin.Stats
}

// New returns a Stager ready to Open.
func New() *Stager { return &Stager{} }

var _ plugin.Stager = (*Stager)(nil)

// Describe declares Options.
func (s *Stager) Describe(context.Context) (*plugin.StagerInfo, error) {
	return &plugin.StagerInfo{Name: "staging-pread", Options: Options}, nil
}

// unit is the state of one cache entry's bytes.
type unit struct {
	done chan struct{} // closed when the read finished
	err  error
}

// Open lays out slot memory within the budget, creates the shared-memory
// file, reads the always-needed tensors and starts the I/O workers.
func (s *Stager) Open(ctx context.Context, req *plugin.OpenRequest) (*plugin.OpenResponse, error) {
	if s.file != nil {
		return nil, errors.New("staging-pread: already open")
	}
	opt, err := parseOptions(req.Options)
	if err != nil {
		return nil, err
	}
	lay, err := newLayout(req)
	if err != nil {
		return nil, err
	}
	slots := 0
	switch {
	case lay.residentSize > req.Budget:
		return nil, fmt.Errorf("staging-pread: budget %d bytes is under the always-needed %d bytes", req.Budget, lay.residentSize)
	case lay.slotSize > 0:
		slots = int((req.Budget - lay.residentSize) / lay.slotSize)
		if slots < 1 {
			return nil, fmt.Errorf("staging-pread: budget %d bytes holds the always-needed %d bytes but not one %d-byte expert slot beside them", req.Budget, lay.residentSize, lay.slotSize)
		}
	}
	policy, err := cache.NewPolicy(opt.policy, opt.halfLife*float64(slots))
	if err != nil {
		return nil, fmt.Errorf("staging-pread: %w", err)
	}
	devs, shardDev, err := newDevices(req, opt)
	if err != nil {
		return nil, err
	}
	rd, err := openReader(req.Shards, opt.directIO)
	if err != nil {
		return nil, fmt.Errorf("staging-pread: %w", err)
	}
	*s = Stager{req: req, opt: opt, lay: lay, rd: rd, slots: slots, pins: map[uint64][]*cache.Entry{}, devs: devs, shardDev: shardDev, unitDev: map[int]*device{}}
	s.loaded = sync.NewCond(&s.mu)
	for _, d := range devs {
		d.work = sync.NewCond(&s.mu)
	}
	// A unit is read through the group of its first tensor's shard (a
	// layer's routed tensors normally share a shard).
	for layer, ids := range lay.unitTensors {
		s.unitDev[layer] = devs[shardDev[req.Tensors[ids[0]].Shard]]
	}
	s.closed = make(chan struct{})
	s.cache = cache.New(int64(slots)*lay.slotSize, policy)
	for i := slots - 1; i >= 0; i-- {
		s.free = append(s.free, i)
	}
	if err := s.createSlots(req.ShmDir, lay.residentSize+int64(slots)*lay.slotSize); err != nil {
		rd.close()
		return nil, err
	}
	s.stats.BudgetBytes = req.Budget
	if err := s.readResident(ctx); err != nil {
		s.Close(ctx)
		return nil, err
	}
	for _, d := range devs {
		for range d.workers {
			s.wg.Add(1)
			go s.worker(d)
		}
	}
	slog.Info("staging-pread open", "mode", s.mode())
	return &plugin.OpenResponse{Regions: []plugin.Region{s.region}, Mode: s.mode()}, nil
}

func (s *Stager) createSlots(dir string, size int64) error {
	f, err := os.CreateTemp(dir, "k3-pread-slots-*")
	if err != nil {
		return fmt.Errorf("staging-pread: slot memory: %w", err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("staging-pread: slot memory %s: %w", f.Name(), err)
	}
	var mem []byte
	if size > 0 {
		mem, err = unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			return fmt.Errorf("staging-pread: mmap %s: %w", f.Name(), err)
		}
	}
	s.file, s.mem = f, mem
	s.region = plugin.Region{Kind: plugin.RegionShm, Path: f.Name(), Size: size}
	return nil
}

// readResident reads the always-needed tensors with every worker's share
// of the reads in parallel.
func (s *Stager) readResident(ctx context.Context) error {
	ids := make(chan part)
	errs := make(chan error, s.opt.workers)
	for range s.opt.workers {
		go func() {
			var first error
			for p := range ids {
				if first == nil {
					first = s.read(p)
				}
			}
			errs <- first
		}()
	}
	for _, p := range s.lay.resident {
		if ctx.Err() != nil {
			break
		}
		ids <- p
	}
	close(ids)
	var err error
	for range s.opt.workers {
		err = errors.Join(err, <-errs)
	}
	return errors.Join(err, ctx.Err())
}

// read performs one aligned read into slot memory and counts it.
func (s *Stager) read(p part) error {
	start := time.Now()
	err := s.rd.readAt(s.mem[p.memOff:p.memOff+p.readLen], p.shard, p.fileOff, int(p.inner+p.size))
	d := time.Since(start)
	s.mu.Lock()
	s.stats.Reads++
	s.stats.BytesRead += p.readLen
	s.stats.ReadTime += d
	dev := s.devs[s.shardDev[p.shard]]
	dev.reads++
	dev.bytesRead += p.readLen
	dev.readTime += d
	s.mu.Unlock()
	return err
}

func (s *Stager) mode() string {
	dio := "on"
	if why := s.rd.whyBuffered(); why != "" {
		dio = "off (" + why + ")"
	}
	return fmt.Sprintf("pread direct-io=%s %s policy=%s slots=%d slot=%dKiB resident=%dMiB",
		dio, deviceMode(s.devs), s.opt.policy, s.slots, s.lay.slotSize>>10, s.lay.residentSize>>20)
}

// Stats reports the counters; ResidentBytes is the slot memory in use.
func (s *Stager) Stats(context.Context) (*plugin.Stats, error) {
	if s.file == nil {
		return nil, errors.New("staging-pread: not open")
	}
	s.mu.Lock()
	st := s.stats
	st.Evictions = s.cache.Evictions()
	st.ResidentBytes = s.lay.residentSize + s.cache.Used()
	st.Devices = deviceStats(s.devs)
	s.mu.Unlock()
	st.DirectIO = s.rd.directIO()
	st.Mode = s.mode()
	return &st, nil
}

// Close stops the workers, unmaps and removes the slot memory.
func (s *Stager) Close(context.Context) error {
	if s.file == nil {
		return nil
	}
	s.mu.Lock()
	s.closing = true
	close(s.closed)
	for _, d := range s.devs {
		d.work.Broadcast()
	}
	s.loaded.Broadcast()
	s.mu.Unlock()
	s.wg.Wait()
	var err error
	if s.mem != nil {
		err = unix.Munmap(s.mem)
	}
	s.rd.close()
	s.file.Close()
	err = errors.Join(err, os.Remove(s.file.Name()))
	s.file, s.mem = nil, nil
	return err
}
