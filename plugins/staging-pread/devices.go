package stagingpread

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/readq"
)

// device is one group of shards read by its own workers from its own
// queue: the shards on one device (or in one directory, or one file, as
// the devices option says), so that a model split over several drives
// reads from all of them at once instead of queueing every read behind
// the same few workers.
type device struct {
	name    string
	shards  []int
	workers int
	queue   *readq.Queue // reads to do: demand, current hints, guesses
	work    *sync.Cond   // signals the workers: queue not empty or closing
	// counters of the reads of its shards, under the stager's mutex
	reads     uint64
	bytesRead int64
	readTime  time.Duration
}

// groupShards groups the shard paths by the devices option: "auto" by
// the device that holds each file (st_dev), "dir" by directory (symlinks
// resolved), "per-file" one group per shard, "one" a single group. It
// returns the groups' names and each shard's group.
func groupShards(paths []string, mode string) (names []string, of []int, err error) {
	of = make([]int, len(paths))
	index := map[string]int{}
	for i, p := range paths {
		var name string
		switch mode {
		case "one":
			name = "all"
		case "per-file":
			name = p
		case "dir":
			real, err := filepath.EvalSymlinks(p)
			if err != nil {
				return nil, nil, fmt.Errorf("shard %s: %w", p, err)
			}
			name = filepath.Dir(real)
		default: // auto
			var st unix.Stat_t
			if err := unix.Stat(p, &st); err != nil {
				return nil, nil, fmt.Errorf("shard %s: %w", p, err)
			}
			name = strconv.FormatUint(uint64(unix.Major(st.Dev)), 10) + ":" + strconv.FormatUint(uint64(unix.Minor(st.Dev)), 10)
		}
		g, ok := index[name]
		if !ok {
			g = len(names)
			index[name] = g
			names = append(names, name)
		}
		of[i] = g
	}
	return names, of, nil
}

// parseDeviceWorkers reads the device_workers option: NAME=N pairs,
// comma-separated, where NAME is a group's name (a device's major:minor
// with devices=auto) or a shard path (which stands for its group).
func parseDeviceWorkers(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		i := strings.LastIndexByte(kv, '=')
		if i <= 0 {
			return nil, fmt.Errorf("staging-pread: option device_workers: %q is not NAME=N", kv)
		}
		n, err := strconv.Atoi(kv[i+1:])
		if err != nil || n < 1 || n > 256 {
			return nil, fmt.Errorf("staging-pread: option device_workers: %q: workers out of range 1..256", kv)
		}
		out[kv[:i]] = n
	}
	return out, nil
}

// newDevices groups req's shards (option devices) and gives each group
// its workers: device_workers where it names the group or some of its
// shards, else io_workers.
// Their work conditions are the caller's to set.
func newDevices(req *plugin.OpenRequest, opt options) ([]*device, []int, error) {
	names, of, err := groupShards(req.Shards, opt.devices)
	if err != nil {
		return nil, nil, fmt.Errorf("staging-pread: %w", err)
	}
	devs := make([]*device, len(names))
	for g, name := range names {
		devs[g] = &device{name: name, workers: opt.workers, queue: readq.New()}
	}
	// A group named by its shards takes the most any of them is given (a
	// group of shards from several devices, devices=one, keeps the fastest
	// device's readers); a group named itself takes what it is given.
	byShard := make([]int, len(devs))
	for i, g := range of {
		devs[g].shards = append(devs[g].shards, i)
		if n, ok := opt.devWorkers[req.Shards[i]]; ok {
			byShard[g] = max(byShard[g], n)
		}
	}
	for g, d := range devs {
		if n, ok := opt.devWorkers[d.name]; ok {
			d.workers = n
		} else if byShard[g] > 0 {
			d.workers = byShard[g]
		}
	}
	for name := range opt.devWorkers {
		if !known(name, names, req.Shards) {
			return nil, nil, fmt.Errorf("staging-pread: option device_workers names %q, which is no device group (%s) or shard of this model", name, strings.Join(names, ", "))
		}
	}
	return devs, of, nil
}

func known(name string, lists ...[]string) bool {
	for _, l := range lists {
		for _, x := range l {
			if x == name {
				return true
			}
		}
	}
	return false
}

// deviceMode is the devices' part of the mode line: "workers=4" for one
// group, "workers=4@259:0+2@259:1" for several.
func deviceMode(devs []*device) string {
	parts := make([]string, len(devs))
	for i, d := range devs {
		parts[i] = strconv.Itoa(d.workers)
		if len(devs) > 1 {
			parts[i] += "@" + d.name
		}
	}
	return "workers=" + strings.Join(parts, "+")
}

// deviceStats are the devices' counters for Stats. The caller holds the
// stager's mutex.
func deviceStats(devs []*device) []plugin.DeviceStats {
	out := make([]plugin.DeviceStats, len(devs))
	for i, d := range devs {
		out[i] = plugin.DeviceStats{Name: d.name, Workers: d.workers, Shards: append([]int(nil), d.shards...),
			Reads: d.reads, BytesRead: d.bytesRead, ReadTime: d.readTime}
	}
	return out
}

// queueLen is the number of reads queued on every device. The caller
// holds s.mu.
func (s *Stager) queueLen() int {
	n := 0
	for _, d := range s.devs {
		n += d.queue.Len()
	}
	return n
}
