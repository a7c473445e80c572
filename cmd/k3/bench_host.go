package main

import (
	"time"

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
	h.ReadBandwidth, h.ReadDirect = config.ReadBandwidth(paths, 4, 4<<20, time.Second, 1<<30)
	return h
}
