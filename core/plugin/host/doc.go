// Package host is the k3 host's side of the plugin SDK (core/plugin): it
// starts plugins, supervises and restarts them, creates the arena they
// compute in and checks a profile's options against what a plugin
// declares. A plugin's author needs none of it.
//
// The host starts a plugin with StartStager or StartKernels from a Launch:
// a built-in by name (the k3 binary re-executes itself as `k3 plugin NAME`,
// which runs ServeBuiltin; cmd/k3 registers the built-ins with
// RegisterStager and RegisterKernels), an external binary by path, or the
// same implementation in-process with no IPC. SuperviseStager and
// SuperviseKernels restart a plugin that dies and report ErrRestarted so
// the caller re-issues its step; a restart that fails is retried with
// backoff, on the next calls and in the background, and their Health says
// ok, restarting or down (with the reason) meanwhile (health.go). A
// plugin dies with its host however the host dies: the host has the kernel
// signal it on the host's death and passes its pid (launch.go); the
// plugin's half is in core/plugin. CreateArena makes the shared memory
// kernels compute in, with the allocator the host places buffers with;
// the plugin maps it with plugin.OpenArena. ResolveOptions is what the
// host sends a plugin for a profile's settings, FormatOptions how the mode
// line shows them.
package host
