#!/usr/bin/env bash
# Starts the demo agent on loopback and the sidecar in front of it (local
# mode), sends one request through, prints the curl line, then keeps the
# sidecar in the foreground until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
export SUPERVAIZER_API_KEY=${SUPERVAIZER_API_KEY:-dev-local-key}
export SIDECAR_PORT=${SIDECAR_PORT:-8080}
export AGENT_ADDR=${AGENT_ADDR:-127.0.0.1:8000}
# local mode: make sure no workspace_auth setting leaks in from the shell.
unset SUPERVAIZER_WORKSPACE_AUTH_REQUIRED SUPERVAIZER_WORKSPACE_AUTH_ISSUER SUPERVAIZER_WORKSPACE_AUTH_AUDIENCE \
      SUPERVAIZER_WORKSPACE_AUTH_PUBLIC_KEY SUPERVAIZER_WORKSPACE_AUTH_JWKS_URL

# Refuse to talk to whatever else may already own the ports.
for addr in "$AGENT_ADDR" "127.0.0.1:$SIDECAR_PORT"; do
  if curl -s -o /dev/null --max-time 1 "http://$addr/"; then
    echo "run-demo: something already listens on $addr; stop it or set AGENT_ADDR / SIDECAR_PORT" >&2
    exit 1
  fi
done

bin/demo-agent -listen "$AGENT_ADDR" & agent=$!
bin/supervaizer-sidecar run --config examples/Caddyfile.local --adapter caddyfile & sidecar=$!
trap 'kill $agent $sidecar 2>/dev/null || true' EXIT INT TERM

ready=
for _ in $(seq 1 100); do
  if curl -fsS "localhost:$SIDECAR_PORT/_sidecar/ready" >/dev/null 2>&1; then ready=1; break; fi
  kill -0 "$agent" 2>/dev/null || { echo "run-demo: the demo agent exited" >&2; exit 1; }
  kill -0 "$sidecar" 2>/dev/null || { echo "run-demo: the sidecar exited" >&2; exit 1; }
  sleep 0.1
done
[ -n "$ready" ] || { echo "run-demo: the sidecar did not become ready" >&2; exit 1; }

echo
echo "Try it (the body is the fixture's job.start, examples/request.json):"
echo "  curl -sS localhost:$SIDECAR_PORT/a2a -H 'X-API-Key: $SUPERVAIZER_API_KEY' -H 'Content-Type: application/json' -d @examples/request.json"
echo
echo "Answer through the sidecar:"
curl -sS "localhost:$SIDECAR_PORT/a2a" -H "X-API-Key: $SUPERVAIZER_API_KEY" -H 'Content-Type: application/json' -d @examples/request.json
echo
echo "Without the key (refused by the sidecar, the agent is not called):"
curl -sS -w '  HTTP %{http_code}\n' "localhost:$SIDECAR_PORT/a2a" -H 'Content-Type: application/json' -d @examples/request.json
echo
if [ -n "${RUN_ONCE:-}" ]; then exit 0; fi
echo "Sidecar on http://localhost:$SIDECAR_PORT, bound to 127.0.0.1 (agent on $AGENT_ADDR). Ctrl-C to stop."
wait $sidecar
