// Package plugin is the SDK for k3 backends, what a plugin's author
// builds against: the Stager and Kernels contracts with their request and
// response types, the typed ops (MatMul), the options a plugin declares
// (OptionSpec, ParseOptions), the Serve functions, and what a plugin reads
// shared memory with (OpenArena, MapRegions). Helpers authors reuse sit
// beside it: cache (eviction policies, holds), readq (a shared read queue),
// ggufreq (an OpenRequest from a GGUF file) and plugintest (conformance
// checks). The host's side, starting, supervising and restarting plugins,
// creating the arena and checking a profile's options against a
// declaration, is core/plugin/host, which a plugin does not import.
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
// The control plane is go-plugin's gRPC (the protobuf lives in
// internal/pb, converted by toproto.go and fromproto.go, and never shows in
// the API); the data plane is shared memory. A stager answers Acquire with
// Locations in Regions (shard files or its own slot file) that the core
// and kernels map; kernels read and write the Arena, which the host
// creates, so a plugin that dies loses nothing and the step is re-issued.
// A kernels plugin's Execute, made hundreds of times per token, skips gRPC
// when the plugin accepts the doorbell the host offers at start: one
// request slot in a shared file, with futex wake-ups (doorbell.go); a
// plugin built on an older SDK is driven over gRPC. Both ends of the wire
// live here, tested against each other; the host reaches its ends through
// internal/wire, which also holds what both sides share (the handshake,
// the environment between them, the shared-memory file names).
//
// A plugin dies with its host however the host dies: it gets a
// parent-death signal and the host's pid, and removes its shared memory
// and exits once its parent is gone (orphan.go). Its slog output comes out
// of the host's logger with the plugin's name.
package plugin
