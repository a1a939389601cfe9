# syntax=docker/dockerfile:1
#
# supervaizer-sidecar image: a static Caddy binary (standard modules +
# supervaizer_auth) on distroless, running as UID/GID 65532.
#
#   docker build -t supervaizer-sidecar .
#   docker run --rm -p 8080:8080 \
#     -v "$PWD/Caddyfile.example:/etc/supervaizer/Caddyfile:ro" \
#     -e SUPERVAIZER_API_KEY=... -e SUPERVAIZER_SERVER_ID=... \
#     -e SUPERVAIZER_WORKSPACE_AUTH_REQUIRED=true \
#     -e SUPERVAIZER_WORKSPACE_AUTH_ISSUER=... \
#     -e SUPERVAIZER_WORKSPACE_AUTH_JWKS_URL=... \
#     supervaizer-sidecar
#
# The go build line below is checked by deploy/k8s/dockerfile_test.go, which
# builds the binary with the same flags and verifies it is statically linked.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
# The context is the sources only: .dockerignore keeps out build outputs and
# key material (keys/, *.key, *.pem); the build needs none of it.
COPY . .
ARG TARGETOS
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags="-s -w" -o /out/supervaizer-sidecar ./cmd/supervaizer-sidecar

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/supervaizer-sidecar /usr/bin/supervaizer-sidecar
# The Caddyfile is mounted here (Kubernetes: a read-only ConfigMap).
# With a read-only root filesystem, point XDG_DATA_HOME and XDG_CONFIG_HOME
# at a writable volume (deploy/k8s does).
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/bin/supervaizer-sidecar", "run", "--config", "/etc/supervaizer/Caddyfile", "--adapter", "caddyfile"]
