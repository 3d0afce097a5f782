# syntax=docker/dockerfile:1
#
# The agentsilo image: static silo and client binaries on a distroless base,
# running as a numeric non-root user. Build from the repository root:
#
#   docker build -t agentsilo/agentsilo:dev .
#
# deploy/k8s runs it; docs/operations.md tells how.

# The Go version is go.mod's.
FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# TARGETOS and TARGETARCH are set by BuildKit (docker buildx --platform ...).
ARG TARGETOS
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -buildvcs=false -ldflags="-s -w" -o /out/ ./cmd/silo ./cmd/client

# No shell, no package manager, CA certificates and /etc/passwd only; the
# nonroot user is 65532, as deploy/k8s expects.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/silo /out/client /usr/local/bin/
USER 65532:65532
# gateway (gRPC), silo-to-silo, gossip (TCP and UDP), HTTP (/healthz, /readyz, /metrics)
EXPOSE 7070 7071 7946 7946/udp 8080
ENTRYPOINT ["/usr/local/bin/silo"]
