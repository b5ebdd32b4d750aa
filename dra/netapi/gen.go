package netapi

// protoc from Debian's protobuf-compiler and the plugins test/deps.sh
// proto installs ($FASTPATH_PROTOC_GEN): make generate.
//go:generate protoc --plugin=protoc-gen-go=${FASTPATH_PROTOC_GEN}/protoc-gen-go --plugin=protoc-gen-go-grpc=${FASTPATH_PROTOC_GEN}/protoc-gen-go-grpc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative netapi.proto
