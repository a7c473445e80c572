package stagingpread

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/plugin/plugintest"
)

// moveShard copies shard i of m into dir and points the model's request
// at the copy (the oracle keeps reading the original, the same bytes).
func moveShard(t *testing.T, m *plugintest.Model, i int, dir string) {
	t.Helper()
	src, err := os.Open(m.Req.Shards[i])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst := filepath.Join(dir, filepath.Base(m.Req.Shards[i]))
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, src); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	m.Req.Shards[i] = dst
}

// TestDevices: shards in two places are read by two groups of workers,
// each with its own queue. A whole trace's bytes are the files', both
// groups read, their counters add up to the stager's, and the mode line
// names each group's workers. devices=dir groups by directory (any
// machine); devices=auto by the device, tried with /dev/shm where it is a
// filesystem of its own; devices=one keeps a single group.
func TestDevices(t *testing.T) {
	shm := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "k3-devtest-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			shm = d
		}
	}
	for _, tc := range []struct {
		mode   string
		onShm  bool
		groups int
	}{{"dir", false, 2}, {"per-file", false, 2}, {"one", false, 1}, {"auto", true, 2}} {
		t.Run(tc.mode, func(t *testing.T) {
			m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
			other := t.TempDir()
			if tc.onShm {
				if shm == "" {
					t.Skip("no /dev/shm")
				}
				other = shm + "/" + tc.mode
				if err := os.Mkdir(other, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			moveShard(t, m, 1, other)
			names, _, err := groupShards(m.Req.Shards, tc.mode)
			if err != nil {
				t.Fatal(err)
			}
			if tc.mode == "auto" && len(names) == 1 {
				t.Skipf("%s and the temporary directory are on one device", other)
			}
			// Shard 1's group gets 3 workers; with one group, shard 0's
			// 1 does not lower that.
			opts := map[string]string{"io_workers": "2", "devices": tc.mode, "device_workers": m.Req.Shards[0] + "=1," + m.Req.Shards[1] + "=3"}
			if tc.groups > 1 {
				opts["device_workers"] = m.Req.Shards[1] + "=3"
			}
			budget, _ := Footprint(&m.Req, 6)
			s := New()
			r, resp, err := plugintest.NewRunner(context.Background(), s, m, m.Request(budget, t.TempDir(), opts))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			defer r.Close()
			tr := plugintest.ZipfTrace(3, 12, m.Layers, m.Experts, m.TopK, 0.8)
			if err := r.Run(context.Background(), tr); err != nil {
				t.Fatal(err)
			}
			st, err := s.Stats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Devices) != tc.groups {
				t.Fatalf("%d device groups, want %d: %+v", len(st.Devices), tc.groups, st.Devices)
			}
			var reads uint64
			var bytes int64
			var shards []int
			for _, d := range st.Devices {
				if d.Reads == 0 {
					t.Errorf("group %s read nothing", d.Name)
				}
				reads += d.Reads
				bytes += d.BytesRead
				shards = append(shards, d.Shards...)
			}
			if reads != st.Reads || bytes != st.BytesRead {
				t.Errorf("groups read %d times %d bytes, the stager %d times %d bytes", reads, bytes, st.Reads, st.BytesRead)
			}
			if diff := cmp.Diff([]int{0, 1}, shards); diff != "" {
				t.Errorf("shards of the groups (-want +got):\n%s", diff)
			}
			want := "workers=3 "
			if tc.groups > 1 {
				want = "workers=2@" + st.Devices[0].Name + "+3@" + st.Devices[1].Name + " "
			}
			if !strings.Contains(resp.Mode, want) {
				t.Errorf("mode %q lacks %q", resp.Mode, want)
			}
		})
	}
}

// TestDeviceWorkersRefused: device_workers naming no group or shard, or
// out of range, is refused at Open.
func TestDeviceWorkersRefused(t *testing.T) {
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	budget, _ := Footprint(&m.Req, 6)
	for _, v := range []string{"nosuch=2", m.Req.Shards[0] + "=0", m.Req.Shards[0], "=4"} {
		s := New()
		_, err := s.Open(context.Background(), m.Request(budget, t.TempDir(), map[string]string{"device_workers": v}))
		if err == nil {
			s.Close(context.Background())
			t.Errorf("device_workers=%q accepted", v)
		} else if !strings.Contains(err.Error(), "device_workers") {
			t.Errorf("device_workers=%q: %v", v, err)
		}
	}
}
