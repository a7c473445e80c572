package stagingpread

import (
	"fmt"

	"github.com/k3-inference/k3/core/plugin"
)

// Options are the options staging-pread declares (Describe).
var Options = []plugin.OptionSpec{
	{Name: "direct_io", Type: plugin.OptionString, Default: "auto", Values: []string{"auto", "on", "off"},
		Doc: "O_DIRECT reads: auto (where the filesystem allows them), on (fail where it does not), off"},
	{Name: "io_workers", Type: plugin.OptionInt, Default: "4", Doc: "concurrent reads (queue depth) per device group, 1..256"},
	{Name: "devices", Type: plugin.OptionString, Default: "auto", Values: []string{"auto", "dir", "per-file", "one"},
		Doc: "how shards group into devices, each read by its own io_workers: auto (by the device holding each file), dir (by directory), per-file, one (a single group)"},
	{Name: "device_workers", Type: plugin.OptionString, Default: "",
		Doc: "workers of particular device groups, NAME=N,... (NAME a group's name, e.g. 259:1, or a shard path); the others get io_workers"},
	{Name: "cache_policy", Type: plugin.OptionString, Default: "lfru", Values: []string{"lfru", "lru"}, Doc: "expert-cache eviction policy"},
	{Name: "lfru_half_life", Type: plugin.OptionFloat, Default: "8", Doc: "LFRU frequency half-life in slot lookups, as a multiple of the slot count"},
}

// options are the stager's settings from OpenRequest.Options.
type options struct {
	directIO string // auto, on, off
	workers  int
	policy   string
	halfLife float64 // LFRU half-life in slot lookups, as a multiple of the slot count
	devices  string  // auto, dir, per-file, one
	// devWorkers are the workers of the groups (or shards' groups) named
	devWorkers map[string]int
}

func parseOptions(m map[string]string) (options, error) {
	v, err := plugin.ParseOptions(Options, m)
	if err != nil {
		return options{}, fmt.Errorf("staging-pread: %w", err)
	}
	o := options{directIO: v.String("direct_io"), workers: v.Int("io_workers"), policy: v.String("cache_policy"), halfLife: v.Float("lfru_half_life"),
		devices: v.String("devices")}
	if o.workers < 1 || o.workers > 256 {
		return o, fmt.Errorf("staging-pread: option io_workers=%d: out of range 1..256", o.workers)
	}
	o.devWorkers, err = parseDeviceWorkers(v.String("device_workers"))
	return o, err
}

// part is one tensor's bytes inside a slot or the resident area: the
// aligned file range [fileOff, fileOff+readLen) lands at memOff, and the
// tensor's first byte at memOff+inner.
type part struct {
	shard   int
	fileOff int64
	readLen int64
	memOff  int64
	inner   int64
	size    int64
}

// layout places every tensor in slot memory: the always-needed tensors
// once, at the start; then fixed-size slots, one per cached (layer, expert)
// unit holding that expert's slice of every routed tensor of the layer.
type layout struct {
	resident     map[int]part // by tensor ID
	residentSize int64
	// unitTensors[layer] are the routed tensors of the layer; partOff[id]
	// is where tensor id's slice starts inside a slot.
	unitTensors map[int][]int
	partOff     map[int]int64
	slotSize    int64
	experts     map[int]int // layer → expert count
}

func newLayout(req *plugin.OpenRequest) (*layout, error) {
	l := &layout{resident: map[int]part{}, unitTensors: map[int][]int{}, partOff: map[int]int64{}, experts: map[int]int{}}
	unitSize := map[int]int64{}
	for id, t := range req.Tensors {
		if err := t.Validate(len(req.Shards)); err != nil {
			return nil, fmt.Errorf("staging-pread: %w", err)
		}
		if !t.Routed() {
			p := placeRange(t.Shard, t.Offset, t.Size, l.residentSize)
			l.resident[id] = p
			l.residentSize += p.readLen
			continue
		}
		// A slice may start anywhere in a 4 KiB block, so reserve room for
		// the worst case.
		l.partOff[id] = unitSize[t.Layer]
		unitSize[t.Layer] += alignUp(t.ExpertSize + align - 1)
		l.unitTensors[t.Layer] = append(l.unitTensors[t.Layer], id)
		l.experts[t.Layer] = max(l.experts[t.Layer], t.Experts)
	}
	for _, s := range unitSize {
		l.slotSize = max(l.slotSize, s)
	}
	return l, nil
}

// placeRange lays out the aligned read of [off, off+size) at memOff.
func placeRange(shard int, off, size, memOff int64) part {
	start := alignDown(off)
	inner := off - start
	return part{shard: shard, fileOff: start, readLen: alignUp(inner + size), memOff: memOff, inner: inner, size: size}
}

// unitParts are the reads that fill a slot at base with expert e of layer.
func (l *layout) unitParts(req *plugin.OpenRequest, layer, e int, base int64) []part {
	var ps []part
	for _, id := range l.unitTensors[layer] {
		t := req.Tensors[id]
		if e >= t.Experts {
			continue
		}
		ps = append(ps, placeRange(t.Shard, t.Offset+int64(e)*t.ExpertSize, t.ExpertSize, base+l.partOff[id]))
	}
	return ps
}

// Footprint is the memory staging-pread needs for req with the given number
// of expert slots: the always-needed tensors plus the slots. Tests and
// profiles use it to pick budgets.
func Footprint(req *plugin.OpenRequest, slots int) (int64, error) {
	l, err := newLayout(req)
	if err != nil {
		return 0, err
	}
	return l.residentSize + int64(slots)*l.slotSize, nil
}
