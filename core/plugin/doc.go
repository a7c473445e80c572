// Package plugin is the SDK for k3 backends: the Stager and Kernels
// contracts, the go-plugin handshake, the wire protocol and the
// shared-memory arena. Third-party backends import this package and call
// Serve.
//
// The control plane is go-plugin's gRPC (the protobuf lives in
// internal/pb, converted by toproto.go and fromproto.go, and never shows in
// the API); the data plane is shared memory. A stager answers Acquire with
// Locations in Regions (shard files or its own slot file) that the core
// and kernels map; kernels read and write the Arena, which the core
// creates, so a plugin that dies loses nothing and the step is re-issued.
// A kernels plugin's Execute, made hundreds of times per token, skips gRPC
// when the plugin accepts the doorbell the host offers at start: one
// request slot in a shared file, with futex wake-ups (doorbell.go); a
// plugin built on an older SDK is driven over gRPC.
//
// A backend is a Go program whose main is one call:
//
//	func main() { plugin.ServeStager(mystager.New()) }
//
// plugins/example-stager and plugins/example-kernels are complete ones,
// each a module of its own built as a third party builds it, and
// plugintest checks any Stager against the files it serves (CheckBudgets,
// CheckKillRestart). A plugin declares the options it takes (OptionSpec in
// StagerInfo and KernelsInfo); the host checks the profile against the
// declaration before Open and sends only those. docs/plugins.md is the
// guide.
//
// The host starts a plugin with StartStager or StartKernels from a Launch:
// a built-in by name (the k3 binary re-executes itself as `k3 plugin NAME`),
// an external binary by path, or the same implementation in-process with no
// IPC. SuperviseStager and SuperviseKernels restart a plugin that dies and
// report ErrRestarted so the caller re-issues its step; a restart that fails
// is retried with backoff, on the next calls and in the background, and
// their Health says ok, restarting or down (with the reason) meanwhile
// (health.go). A plugin dies with its host however the host dies: it gets a
// parent-death signal and the host's pid, and removes its shared memory and
// exits once its parent is gone (orphan.go). The plugin's slog output comes
// out of the host's logger with the plugin's name.
package plugin
