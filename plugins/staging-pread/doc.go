// Package stagingpread is a Stager that reads routed experts with aligned
// O_DIRECT preads into a budgeted, frequency-aware cache of shared-memory slots.
package stagingpread
