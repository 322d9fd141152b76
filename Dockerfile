# One image with the product's commands in /usr/local/bin: worker,
# triage, ingest, report, retention and migrate. Schemas, migrations and
# the default configuration are embedded in the binaries. The development
# commands (devtools/cmd: bench, chaos, repaircompare, the LLM simulator
# llmsim, natsd) are not built into it.
#
#   docker build -t ghcr.io/extractq/extractq:latest .
#
# Kubernetes manifests (deploy/k8s) pick the command per workload.

FROM golang:1.26-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-trimpath GOCACHE=/cache/go-build
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/cache/go-build \
    go build -ldflags="-s -w" -o /out/ \
        ./cmd/worker ./cmd/triage ./cmd/ingest ./cmd/report ./cmd/retention ./cmd/migrate ./cmd/eval

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
# triage's HTTP port and the worker's health port.
EXPOSE 8080 9090
CMD ["/usr/local/bin/worker"]
