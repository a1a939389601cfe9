#!/usr/bin/env bash
# bench/run.sh — the body of `make bench` (bench.mk), after the build:
#   1. the Go benchmarks of the hot paths (-count runs, medians taken later);
#   2. the memory benchmarks (token cache, idempotency memory store);
#   3. the load run (bin/sidecarbench), which also reads 1-2 and prints the
#      figures table, the ratios and PASS/FAIL, and writes
#      bench/results/<timestamp>.json;
#   4. the fairness run (sidecarbench fairness): one workspace flooding a
#      limits rule at 20x while another sends at its normal rate.
# Everything it writes goes to bench/results/ (git-ignored).
#
# Settings (environment; bench.mk passes its variables through):
#   GO                go command (go)
#   BENCH_GO_COUNT    -count of the hot-path benchmarks (3)
#   BENCH_GO_TIME     -benchtime of the hot-path benchmarks (400ms)
#   BENCH_MEM         1: also run the memory benchmarks (~1-2 min); 0: skip (0)
#                     (on their own: make -f bench.mk bench-mem)
#   BENCH_MEM_FULL    1: also the 10^6-insert default-bound memory store case
#                     (a minute or more: its O(n) purge, see README) (0)
#   BENCH_FLAGS       extra flags for sidecarbench (e.g. "-concurrency 32 -rounds 5")
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
COUNT=${BENCH_GO_COUNT:-3}
BT=${BENCH_GO_TIME:-400ms}
MEM=${BENCH_MEM:-0}
MEM_FULL=${BENCH_MEM_FULL:-0}
TS=$(date +%Y%m%d-%H%M%S)
RESULTS=bench/results
mkdir -p "$RESULTS"

# 1,000 SSE streams through the sidecar hold ~2,000 descriptors in it and
# ~1,000 in the bench and in the agent: raise the soft limit if it is low.
need=8192
cur=$(ulimit -n)
if [ "$cur" != unlimited ] && [ "$cur" -lt "$need" ]; then
	hard=$(ulimit -Hn)
	if [ "$hard" = unlimited ] || [ "$hard" -ge "$need" ]; then
		ulimit -n "$need"
	else
		ulimit -n "$hard"
	fi
	echo "ulimit -n raised from $cur to $(ulimit -n)"
fi

GOBENCH=$RESULTS/$TS-gobench.txt
echo "== go benchmarks (hot paths): -count $COUNT -benchtime $BT -> $GOBENCH"
$GO test -run '^$' -benchmem -count "$COUNT" -benchtime "$BT" \
	-bench '^Benchmark(Parse|ParseSteps|ParseThroughput|Verify|DecideCall|VerifiedHeaders|ReadBody|LogDecision|ServeHTTP|ServeHTTPFreshToken|MemoryStore|GuardReplay)$' \
	./jsonrpc ./grants ./gate ./bench | tee "$GOBENCH"

if [ "$MEM" = 1 ]; then
	short=-short
	[ "$MEM_FULL" = 1 ] && short=
	echo "== memory benchmarks (-benchtime 1x) -> $GOBENCH"
	$GO test -run '^$' -benchtime 1x $short -timeout 30m \
		-bench '^Benchmark(VerifiedTokenCacheMemory|MemoryStoreMemory)$' \
		./grants ./bench | tee -a "$GOBENCH"
fi

echo "== load run"
# shellcheck disable=SC2086
./bin/sidecarbench run -sidecar bin/supervaizer-sidecar -gobench "$GOBENCH" -out "$RESULTS/$TS.json" ${BENCH_FLAGS:-}

echo "== fairness run (limits)"
./bin/sidecarbench fairness -sidecar bin/supervaizer-sidecar | tee "$RESULTS/$TS-fairness.txt"
