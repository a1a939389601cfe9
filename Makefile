# supervaizer-sidecar: the README's two commands are `make run` and `make test`.
GO ?= go
BIN := bin

.PHONY: all build run test test-deps sdk-env kube-env soak vet fmt clean

all: build

VERSION ?= $(shell git describe --tags --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)

build: ## the sidecar binary: Caddy + the standard modules + supervaizer_auth; the pod injector (docs/kubernetes.md)
	$(GO) build -ldflags "-X main.version=$(VERSION) -X main.commit=$(COMMIT)" -o $(BIN)/supervaizer-sidecar ./cmd/supervaizer-sidecar
	$(GO) build -o $(BIN)/supervaizer-injector ./cmd/supervaizer-injector
	$(GO) build -o $(BIN)/demo-agent ./examples/demo-agent

run: build ## demo agent on 127.0.0.1:8000 behind the sidecar on localhost:8080, bound to 127.0.0.1 (local mode)
	./examples/run-demo.sh

test-deps: ## what the tests need that Go does not bring: a real redis-server, a Redis Sentinel, promtool
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "installing redis-server (Debian package) for the idempotency tests"; \
	  (apt-get update -qq && apt-get install -y -qq redis-server) >/dev/null; }
	@command -v redis-sentinel >/dev/null 2>&1 || redis-server --help 2>&1 | grep -q -e '--sentinel' || { \
	  echo "installing redis-sentinel (Debian package) for the Redis failover tests"; \
	  (apt-get update -qq && apt-get install -y -qq redis-sentinel) >/dev/null; }
	@command -v promtool >/dev/null 2>&1 || { \
	  echo "installing prometheus (Debian package) for promtool: the alert rules and dashboard tests"; \
	  (apt-get update -qq && apt-get install -y -qq prometheus) >/dev/null; }

sdk-env: ## the real Supervaizer SDK 1.8.0 server's virtualenv for the SDK tests (test/sdkagent/setup.sh, made once)
	@if [ "$${CI:-}" = true ]; then \
	  test/sdkagent/setup.sh >/dev/null; \
	else \
	  err=$$(test/sdkagent/setup.sh 2>&1 >/dev/null) || echo "SDK tests skipped: $$err"; \
	fi

kube-env: ## kube-apiserver, etcd, kubectl and helm for the Kubernetes tests (test/kube/setup.sh: built once, minutes the first time)
	@if [ "$${CI:-}" = true ]; then \
	  test/kube/setup.sh >/dev/null; \
	else \
	  err=$$(test/kube/setup.sh 2>&1 >/dev/null) || echo "Kubernetes tests skipped: $$err"; \
	fi

# test/kube is a Go module of its own (docs/kubernetes.md): ./... of the
# repository does not reach it, so its test package is run on its own (not
# ./... there: that would rebuild kube-apiserver and kubectl with -race).
test: test-deps sdk-env kube-env ## every test, with the race detector
	$(GO) test -race -count=1 -timeout 45m ./...
	cd test/kube && $(GO) test -race -count=1 -timeout 20m .

soak: ## the mixed-load soak and the fault soak (resets, aborts, reloads, Redis restarts), 60 s each (make test runs them for 3 s)
	SOAK_DURATION=$${SOAK_DURATION:-60s} $(GO) test -race -count=1 -run '^(TestSoak|TestFaultSoak)$$' -v ./test/

# test/kube: its test package (./... there would type-check kube-apiserver
# and kubectl again: setup.sh compiles them, with -trimpath).
vet:
	$(GO) vet ./...
	cd test/kube && $(GO) vet .

fmt:
	gofmt -l -w .

clean:
	rm -rf $(BIN)

# make fuzz and make bench live in their own files.
-include fuzz.mk
-include bench.mk
