package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// StorageProbe is what a short read test of the device holding a model
// found: the read bandwidth at a few queue depths with reads the size of
// an expert unit at random aligned offsets, as staging-pread reads. The
// auto profile chooses its I/O settings from it rather than from the
// device's rotational flag, which virtual disks set as they please.
type StorageProbe struct {
	// Device is the block device's major:minor ("" off a block device).
	Device string `json:"device"`
	// Direct reports whether the reads bypassed the page cache
	// (O_DIRECT); without it the numbers may be the page cache's.
	Direct bool  `json:"direct"`
	Block  int64 `json:"block_bytes"`
	// Depths are the queue depths tried and BytesPerSec what each got.
	Depths      []int     `json:"depths"`
	BytesPerSec []float64 `json:"bytes_per_sec"`
	When        time.Time `json:"when"`
}

// probeDepths are the queue depths a probe tries, each for a fifth of its
// time.
var probeDepths = []int{1, 2, 4, 8, 16}

// Best is the highest bandwidth the probe saw.
func (p *StorageProbe) Best() float64 {
	best := 0.0
	for _, b := range p.BytesPerSec {
		best = max(best, b)
	}
	return best
}

// Workers is the smallest queue depth that reached 90% of the best
// bandwidth: more readers only add latency to each read (and take slots
// for reads in flight); fewer leave bandwidth unused.
func (p *StorageProbe) Workers() int {
	best := p.Best()
	for i, b := range p.BytesPerSec {
		if b >= 0.9*best {
			return p.Depths[i]
		}
	}
	return 1
}

// String is the probe's summary for the mode line and logs.
func (p *StorageProbe) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "probe %s direct=%t", Size(p.Block), p.Direct)
	for i, d := range p.Depths {
		fmt.Fprintf(&b, " qd%d=%.2fGB/s", d, p.BytesPerSec[i]/1e9)
	}
	return b.String()
}

// ReadBandwidth reads the files with depth readers of block bytes at
// random block-aligned offsets until d has passed or limit bytes are read,
// and returns bytes/s and whether the reads bypassed the page cache
// (O_DIRECT, where the file system allows it).
func ReadBandwidth(paths []string, depth int, block int64, d time.Duration, limit int64) (float64, bool) {
	block = max(block+4095, 4096) &^ 4095
	type file struct {
		f    *os.File
		size int64
	}
	var files []file
	direct := true
	for _, p := range paths {
		f, err := os.OpenFile(p, os.O_RDONLY|unix.O_DIRECT, 0)
		if err != nil {
			direct = false
			if f, err = os.Open(p); err != nil {
				continue
			}
		}
		if st, err := f.Stat(); err == nil && st.Size() >= block {
			files = append(files, file{f, st.Size()})
		} else {
			f.Close()
		}
	}
	defer func() {
		for _, f := range files {
			f.f.Close()
		}
	}()
	if len(files) == 0 {
		return 0, false
	}
	var total atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for w := range depth {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// An anonymous mapping is page-aligned, as O_DIRECT needs.
			buf, err := unix.Mmap(-1, 0, int(block), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				return
			}
			defer unix.Munmap(buf)
			rng := rand.New(rand.NewPCG(uint64(w), 0x6b3))
			for time.Since(start) < d && total.Load() < limit {
				f := files[rng.IntN(len(files))]
				off := rng.Int64N(f.size/block) * block
				n, err := f.f.ReadAt(buf, off)
				if n == 0 && err != nil {
					if !errors.Is(err, os.ErrClosed) {
						failed.Store(true)
					}
					return
				}
				total.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	if failed.Load() && total.Load() == 0 {
		return 0, false
	}
	return float64(total.Load()) / time.Since(start).Seconds(), direct
}

// ProbeStorage measures the storage under paths: reads of block bytes at
// each of probeDepths, in two passes (the depths up, then down) of
// d/(2*len(probeDepths)) each, keeping each depth's better pass. A shared
// or virtual disk has slow seconds (another tenant, the host's writeback);
// one pass put such a second on whichever depth ran then, and the probe is
// kept for days (a probe taken while other work read the disk chose 1 reader
// on a disk whose reads scale to 4).
func ProbeStorage(paths []string, block int64, d time.Duration) (*StorageProbe, error) {
	p := &StorageProbe{Block: block, Direct: true, When: time.Now().UTC()}
	if len(paths) > 0 {
		p.Device = deviceID(paths[0])
	}
	n := len(probeDepths)
	per := d / time.Duration(2*n)
	p.Depths = slices.Clone(probeDepths)
	p.BytesPerSec = make([]float64, n)
	for pass := range 2 {
		for k := range n {
			i := k
			if pass == 1 {
				i = n - 1 - k
			}
			bw, direct := ReadBandwidth(paths, probeDepths[i], block, per, 1<<40)
			if bw <= 0 {
				return nil, fmt.Errorf("storage probe: nothing could be read from %v", paths)
			}
			p.Direct = p.Direct && direct
			p.BytesPerSec[i] = max(p.BytesPerSec[i], bw)
		}
	}
	return p, nil
}

// deviceID is the major:minor of the device holding path ("" if unknown).
func deviceID(path string) string {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return ""
	}
	return strconv.FormatUint(uint64(unix.Major(st.Dev)), 10) + ":" + strconv.FormatUint(uint64(unix.Minor(st.Dev)), 10)
}

// probeBlock is the read size of the auto profile's probe: about one
// expert unit of a large MoE checkpoint (Kimi K3's Q2_K units are ~10 MB,
// smaller models' ~1-4 MB).
const probeBlock = 4 << 20

// probeMaxAge is how long a cached probe stands for its device.
const probeMaxAge = 7 * 24 * time.Hour

// CachedProbe is the probe of the device holding path: the one cached for
// that device under dir (the user's cache directory's k3/ when dir is
// empty) if it is recent, else a new one of about d, cached there.
func CachedProbe(path, dir string, d time.Duration) (*StorageProbe, error) {
	dev := deviceID(path)
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		dir = filepath.Join(base, "k3")
	}
	file := filepath.Join(dir, "storage-probe-"+strings.ReplaceAll(dev, ":", "-")+".json")
	if data, err := os.ReadFile(file); err == nil && dev != "" {
		var p StorageProbe
		if json.Unmarshal(data, &p) == nil && p.Device == dev && len(p.Depths) > 0 && time.Since(p.When) < probeMaxAge {
			return &p, nil
		}
	}
	p, err := ProbeStorage([]string{path}, probeBlock, d)
	if err != nil {
		return nil, err
	}
	if dev != "" {
		if data, err := json.MarshalIndent(p, "", "  "); err == nil && os.MkdirAll(dir, 0o755) == nil {
			_ = os.WriteFile(file, data, 0o644) // a cache: failing to keep it only costs a probe next time
		}
	}
	return p, nil
}

// DeviceWorkers is the auto profile's per-device split of the storage
// reads for a model whose shards lie at paths on more than one device:
// each device's own probe (CachedProbe, cached under dir, of about d)
// chooses its readers, as staging-pread's device_workers option takes
// them (SHARD=N, a device named by its first shard). "" when the shards
// share one device: io_workers, from that device's probe, covers it.
func DeviceWorkers(paths []string, dir string, d time.Duration) string {
	var firsts []string
	seen := map[string]bool{}
	for _, p := range paths {
		dev := deviceID(p)
		if dev == "" || seen[dev] {
			continue
		}
		seen[dev] = true
		firsts = append(firsts, p)
	}
	if len(firsts) < 2 {
		return ""
	}
	var out []string
	for _, p := range firsts {
		if pr, err := CachedProbe(p, dir, d); err == nil {
			out = append(out, p+"="+strconv.Itoa(pr.Workers()))
		}
	}
	return strings.Join(out, ",")
}
