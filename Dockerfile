# syntax=docker/dockerfile:1
#
# The agentsilo image: static silo and client binaries on a distroless base,
# running as a numeric non-root user. Build from the repository root:
#
#   docker build -t agentsilo/agentsilo:dev .
#
# which is the image deploy/k8s/base runs (its kustomization's images:);
# docs/operations.md tells how to deploy it, or push it to a registry.
#
# Build arguments:
#
#   MAIN    the silo's main package (default ./cmd/silo, the agentsilo silo
#           with the demo agents). A silo of your own, registering your
#           agents, goes in /usr/local/bin/silo instead, the same entry point
#           (deploy/k8s passes it cmd/silo's flags: start from a copy of
#           cmd/silo/main.go):
#             docker build --build-arg MAIN=./cmd/mysilo -t registry.example.com/mysilo:v1 .
#   CLIENT  the client program's package (default ./cmd/client). Building
#           from a module of your own that requires agentsilo, give its
#           import path, github.com/agentsilo/agentsilo/cmd/client (after
#           `go get -tool github.com/agentsilo/agentsilo/cmd/client`, which
#           records its dependencies in your go.sum), and this Dockerfile:
#             docker build -f path/to/agentsilo/Dockerfile --build-arg MAIN=./cmd/mysilo \
#               --build-arg CLIENT=github.com/agentsilo/agentsilo/cmd/client -t ... .

# The Go version is go.mod's.
FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG MAIN=./cmd/silo
ARG CLIENT=./cmd/client
# TARGETOS and TARGETARCH are set by BuildKit (docker buildx --platform ...).
ARG TARGETOS
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    export CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} && \
    go build -trimpath -buildvcs=false -ldflags="-s -w" -o /out/silo "${MAIN}" && \
    go build -trimpath -buildvcs=false -ldflags="-s -w" -o /out/client "${CLIENT}"

# No shell, no package manager, CA certificates and /etc/passwd only; the
# nonroot user is 65532, as deploy/k8s expects.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/silo /out/client /usr/local/bin/
USER 65532:65532
# gateway (gRPC), silo-to-silo, gossip (TCP and UDP), HTTP (/healthz, /readyz, /metrics)
EXPOSE 7070 7071 7946 7946/udp 8080
ENTRYPOINT ["/usr/local/bin/silo"]
