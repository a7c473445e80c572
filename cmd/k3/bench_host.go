package main

import (
	"errors"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/k3-inference/k3/core/config"
)

// benchHost is the machine around the CPU, for `k3 bench --report`: the
// memory, the device the model is on and what it reads at.
type benchHost struct {
	MemTotal    int64  `json:"mem_total_bytes"`
	CgroupLimit int64  `json:"cgroup_limit_bytes"` // 0: none
	Storage     string `json:"storage_kind"`       // nvme, ssd, hdd or unknown
	Device      string `json:"storage_device"`     // the kernel's name and the device's model
	// ReadBandwidth is what 4 readers of 4 MiB at random aligned offsets
	// of the model's files got (bytes/s), with O_DIRECT where the file
	// system allows it (ReadDirect), for about a second before the run:
	// the storage's side of the storage-bound decode rate.
	ReadBandwidth float64 `json:"read_bandwidth_bytes_per_second"`
	ReadDirect    bool    `json:"read_bandwidth_direct_io"`
}

func measureHost(paths []string) benchHost {
	m := config.Detect(paths[0])
	h := benchHost{MemTotal: m.MemTotal, CgroupLimit: m.CgroupLimit, Storage: m.Storage, Device: config.StorageDevice(paths[0])}
	h.ReadBandwidth, h.ReadDirect = readBandwidth(paths, time.Second, 1<<30)
	return h
}

// readBandwidth reads the files with 4 readers of 4 MiB blocks at random
// block-aligned offsets until d has passed or limit bytes are read, and
// returns bytes/s and whether the reads bypassed the page cache.
func readBandwidth(paths []string, d time.Duration, limit int64) (float64, bool) {
	const block = 4 << 20
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
	var wg sync.WaitGroup
	start := time.Now()
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// An anonymous mapping is page-aligned, as O_DIRECT needs.
			buf, err := unix.Mmap(-1, 0, block, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				return
			}
			defer unix.Munmap(buf)
			rng := rand.New(rand.NewPCG(uint64(w), 0x6b3))
			for time.Since(start) < d && total.Load() < limit {
				f := files[rng.IntN(len(files))]
				off := rng.Int64N(f.size/block) * block
				n, err := f.f.ReadAt(buf, off)
				if n == 0 && err != nil && !errors.Is(err, os.ErrClosed) {
					return
				}
				total.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	return float64(total.Load()) / time.Since(start).Seconds(), direct
}
