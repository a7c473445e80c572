// Package plugin is the SDK for k3 backends: the Stager and Kernels
// contracts, the go-plugin handshake, the wire protocol and the shared-memory
// arena. Third-party backends import this package and call Serve.
package plugin
