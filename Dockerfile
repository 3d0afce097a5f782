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
#           agents with cluster.Main, goes in /usr/local/bin/silo instead,
#           the same entry point, which deploy/k8s runs with cmd/silo's
#           flags.
#   CLIENT  the client program's package (default ./cmd/client).
#
# A silo program in a module of your own, which uses agentsilo through a
# replace of a checkout beside it, is built from that module with its
# dependencies vendored (the replaced checkout is outside the build
# context; its vendored copy is inside), and with this Dockerfile:
#
#   go mod edit -tool github.com/agentsilo/agentsilo/cmd/client
#   go mod tidy
#   go mod vendor
#   docker build -f ../agentsilo/Dockerfile --build-arg MAIN=. \
#     --build-arg CLIENT=github.com/agentsilo/agentsilo/cmd/client -t registry.example.com/mysilo:v1 .
#
# docs/kubernetes.md has the steps. Without a vendor directory the build
# downloads the modules go.sum names.

# The Go version is go.mod's.
FROM golang:1.26.8 AS build
WORKDIR /src
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
