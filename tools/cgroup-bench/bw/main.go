// Command bw measures a file's O_DIRECT read bandwidth the way
// staging-pread reads experts: workers goroutines issuing chunk-byte preads
// at random aligned offsets for a while. It prints GB/s (1e9 bytes/s).
//
//	go run ./tools/cgroup-bench/bw -workers 4 -chunk 4194304 -seconds 4 FILE
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	workers := flag.Int("workers", 4, "concurrent readers")
	chunk := flag.Int64("chunk", 4<<20, "bytes per read (rounded up to 4 KiB)")
	seconds := flag.Float64("seconds", 4, "how long to read")
	from := flag.Int64("from", 0, "read at offsets from here")
	span := flag.Int64("span", 0, "within this many bytes (0: to the end)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: bw [flags] FILE")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *workers, (*chunk+4095)&^4095, *from&^4095, *span, time.Duration(*seconds*float64(time.Second))); err != nil {
		fmt.Fprintln(os.Stderr, "bw:", err)
		os.Exit(1)
	}
}

func run(path string, workers int, chunk, from, span int64, d time.Duration) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return fmt.Errorf("open %s with O_DIRECT: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if span <= 0 || from+span > st.Size {
		span = st.Size - from
	}
	blocks := (span - chunk) / 4096
	if blocks <= 0 {
		return fmt.Errorf("%s is smaller than one %d-byte read", path, chunk)
	}
	var total atomic.Int64
	var firstErr atomic.Value
	end := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			// An anonymous mapping is page-aligned, as O_DIRECT needs.
			buf, err := unix.Mmap(-1, 0, int(chunk), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
				return
			}
			defer unix.Munmap(buf)
			rng := rand.New(rand.NewPCG(seed, 7))
			for time.Now().Before(end) {
				n, err := unix.Pread(fd, buf, from+rng.Int64N(blocks)*4096)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				total.Add(int64(n))
			}
		}(uint64(w))
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return err
	}
	fmt.Printf("%.3f\n", float64(total.Load())/time.Since(start).Seconds()/1e9)
	return nil
}
