// Package pb is the generated wire format of the plugin protocol. Nothing
// outside core/plugin sees it.
//
// Regenerate with protoc from Debian's protobuf-compiler (3.21) and the Go
// plugins installed from the module proxy:
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.6
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.3.0
//	go generate ./core/plugin/internal/pb
//
// protoc-gen-go-grpc stays at v1.3.0 because later versions emit code that
// needs a newer google.golang.org/grpc than go.mod's v1.61.
package pb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative k3plugin.proto
