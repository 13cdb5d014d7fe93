// Package proto holds the envd services' .proto files (process, filesystem) and the Go generated
// from them (protoc-gen-go, protoc-gen-connect-go); the generated code is committed, so a build
// needs no protoc. Regenerate after editing a .proto: go generate ./internal/e2bcompat/proto
// (needs protoc, e.g. Debian's protobuf-compiler, and both plugins on PATH).
package proto

//go:generate protoc -I. --go_out=. --go_opt=paths=source_relative --connect-go_out=. --connect-go_opt=paths=source_relative process/process.proto filesystem/filesystem.proto
