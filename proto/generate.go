// Package proto holds agentsilo's protobuf definitions (proto/agentsilo/v1) and
// the command that regenerates their checked-in Go code with pinned tools:
//
//	go generate ./proto
//
// CI regenerates and fails if anything changes.
package proto

//go:generate go run github.com/bufbuild/buf/cmd/buf@v1.75.0 generate
