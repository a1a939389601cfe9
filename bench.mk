# bench.mk — performance targets of the sidecar (project issue 7).
# Included from the Makefile (`include bench.mk`), or on its own:
#   make -f bench.mk bench
#
#   bench          build, Go benchmarks, memory benchmarks, then the load run:
#                  A (agent) B (plain reverse_proxy) B-ctx (B, the client
#                  sending the ten verified headers) C D E F (sidecar) side by
#                  side and interleaved, with the shipped global log options
#                  (Caddyfile.example), plus B and C in a twin process with
#                  reverse_proxy's logger included; per request of the serving
#                  process: CPU, write calls, allocations, bytes, GCs, GC CPU
#                  share (admin /debug/vars on loopback); table, like-with-like
#                  pairs, ratios, PASS/FAIL, JSON in
#                  bench/results/<timestamp>.json. About 4 minutes on 2 cores.
#                  A short smoke run: make bench BENCH_GO_COUNT=1
#                  BENCH_GO_TIME=100ms BENCH_FLAGS="-duration 1s -warmup 200ms
#                  -rounds 2 -latency-duration 500ms -scaling= -sse-streams 0
#                  -tokens 3000"
#   bench-go       only the Go benchmarks of the hot paths (benchstat-friendly)
#   bench-mem      the memory benchmarks (token cache, idempotency memory store),
#                  output in bench/results/<timestamp>-mem.txt
#                  (BENCH_MEM_FULL=1: the slow 10^6-insert default-bound case too)
#   bench-load     only the load run (no Go benchmarks)
#   bench-fairness the limits fairness run: workspace A floods a rate rule at
#                  20x its limit while B sends at its normal rate; B's
#                  success rate and p99 against B alone, PASS/FAIL (~35 s)
#   bench-profile  CPU profiles: the sidecar process under the B, C, D and
#                  F-mem loads (admin endpoint on loopback), the diff C vs B
#                  (pprof -diff_base), the gate's own CPU per request and the
#                  reverse_proxy and GC parts per request of each scenario
#                  (scaled to /proc), and the Go benchmarks of the envelope
#                  parse and the decision; prints pprof -top.
#
# The load generator is Go (bench/cmd/sidecarbench, net/http, a fixed number
# of connections for a fixed duration): nothing to install. redis-server is
# used when it is on PATH (F-redis), never installed here.

# Keep the including Makefile's default goal even if bench.mk comes first.
ifeq ($(.DEFAULT_GOAL),)
BENCH_RESET_DEFAULT_GOAL := 1
endif

GO ?= go
BENCH_BIN ?= bin
BENCH_RESULTS ?= bench/results
# Hot-path Go benchmarks: -count and -benchtime (medians are reported).
BENCH_GO_COUNT ?= 3
BENCH_GO_TIME ?= 400ms
# Memory benchmarks in `make bench` too (1/0; they take 1-2 minutes, so by
# default they run only in bench-mem); the 10^6-insert default-bound
# memory-store case takes minutes more (O(n) purge per claim): opt-in.
BENCH_MEM ?= 0
BENCH_MEM_FULL ?= 0
# Extra flags for sidecarbench, e.g. BENCH_FLAGS="-concurrency 32 -rounds 5".
BENCH_FLAGS ?=
# bench-profile: scenarios and seconds of CPU profile each.
BENCH_PROFILE_SCENARIOS ?= B,C,D,F-mem
BENCH_PROFILE_SECONDS ?= 8

BENCH_ENV = GO="$(GO)" BENCH_GO_COUNT="$(BENCH_GO_COUNT)" BENCH_GO_TIME="$(BENCH_GO_TIME)" \
	BENCH_MEM="$(BENCH_MEM)" BENCH_MEM_FULL="$(BENCH_MEM_FULL)" BENCH_FLAGS="$(BENCH_FLAGS)"

.PHONY: bench bench-build bench-go bench-mem bench-load bench-fairness bench-profile

bench: bench-build ## Go benchmarks + load run; table, ratios, PASS/FAIL, JSON
	@$(BENCH_ENV) bash bench/run.sh

bench-build:
	$(GO) build -o $(BENCH_BIN)/supervaizer-sidecar ./cmd/supervaizer-sidecar
	$(GO) build -o $(BENCH_BIN)/sidecarbench ./bench/cmd/sidecarbench

bench-go:
	$(GO) test -run '^$$' -benchmem -count $(BENCH_GO_COUNT) -benchtime $(BENCH_GO_TIME) \
		-bench '^Benchmark(Parse|ParseSteps|ParseThroughput|Verify|DecideCall|VerifiedHeaders|ReadBody|LogDecision|ServeHTTP|ServeHTTPFreshToken|MemoryStore|GuardReplay)$$' \
		./jsonrpc ./grants ./gate ./bench

bench-mem: ## memory of the token cache and the idempotency memory store (10^3, 10^5, 10^6 entries)
	@mkdir -p $(BENCH_RESULTS)
	@out=$(BENCH_RESULTS)/$$(date +%Y%m%d-%H%M%S)-mem.txt; \
	$(GO) test -run '^$$' -benchtime 1x $(if $(filter 1,$(BENCH_MEM_FULL)),,-short) -timeout 30m \
		-bench '^Benchmark(VerifiedTokenCacheMemory|MemoryStoreMemory)$$' ./grants ./bench > $$out 2>&1; \
	status=$$?; cat $$out; echo "wrote $$out"; exit $$status

bench-load: bench-build
	@mkdir -p $(BENCH_RESULTS)
	@ulimit -n 8192 2>/dev/null || true; \
	./$(BENCH_BIN)/sidecarbench run -sidecar $(BENCH_BIN)/supervaizer-sidecar $(BENCH_FLAGS)

bench-fairness: bench-build ## limits: one workspace flooding while another sends at its normal rate
	./$(BENCH_BIN)/sidecarbench fairness -sidecar $(BENCH_BIN)/supervaizer-sidecar

bench-profile: bench-build
	@mkdir -p $(BENCH_RESULTS)
	./$(BENCH_BIN)/sidecarbench profile -sidecar $(BENCH_BIN)/supervaizer-sidecar \
		-only $(BENCH_PROFILE_SCENARIOS) -seconds $(BENCH_PROFILE_SECONDS) -profile-dir $(BENCH_RESULTS)
	$(GO) test -run '^$$' -bench '^BenchmarkParse$$/^fixture_job_start$$' -benchtime 2s \
		-cpuprofile $(BENCH_RESULTS)/parse.cpu.pprof -o $(BENCH_RESULTS)/jsonrpc.test ./jsonrpc
	$(GO) tool pprof -top -cum -nodecount 30 $(BENCH_RESULTS)/jsonrpc.test $(BENCH_RESULTS)/parse.cpu.pprof
	$(GO) test -run '^$$' -bench '^BenchmarkDecideCall$$' -benchtime 2s \
		-cpuprofile $(BENCH_RESULTS)/decide.cpu.pprof -o $(BENCH_RESULTS)/gate.test ./gate
	$(GO) tool pprof -top -cum -nodecount 30 $(BENCH_RESULTS)/gate.test $(BENCH_RESULTS)/decide.cpu.pprof

ifdef BENCH_RESET_DEFAULT_GOAL
.DEFAULT_GOAL :=
endif
