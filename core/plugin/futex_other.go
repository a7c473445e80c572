//go:build !linux

package plugin

import "time"

// Without a futex the doorbell is not offered and Execute stays on gRPC.
const haveFutex = false

func futexWait(*uint32, uint32, time.Duration) {}

func futexWake(*uint32) {}
