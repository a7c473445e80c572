package plugin

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const haveFutex = true

// Not FUTEX_PRIVATE: the word is in memory shared with another process.
const (
	futexWaitOp = 0 // FUTEX_WAIT
	futexWakeOp = 1 // FUTEX_WAKE
)

// futexWait sleeps while *w == old, at most d (or until a wake-up, or
// spuriously: callers re-check).
func futexWait(w *uint32, old uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWaitOp, uintptr(old), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes whoever sleeps on w.
func futexWake(w *uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWakeOp, 1, 0, 0, 0)
}
