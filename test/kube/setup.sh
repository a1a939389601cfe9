#!/usr/bin/env bash
# Builds (once) what the Kubernetes tests in this folder run: kube-apiserver,
# etcd, kubectl and helm, each from its Go module (pinned in this folder's
# go.mod/go.sum, a module of its own so the product's go.mod gains nothing),
# into build/kube/bin at the repository root (ignored by git), and copies the
# prometheus-operator CRDs the metrics overlay needs (PodMonitor,
# PrometheusRule) from that project's Go module, at the version pinned below,
# into build/kube/crds. A stamp (sha256 of go.mod, go.sum, the mains, this
# script and the Go version) says all is complete; when any of them changes
# it is made again. On success prints
# the bin directory; on failure prints one line naming why and exits 1.
# The first build takes minutes and ~2.5 GB of memory; then it is a stamp check.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
dir="${KUBE_BUILD_DIR:-$root/build/kube}"
bin="$dir/bin"
tools=(kube-apiserver etcd kubectl helm)
promop=github.com/prometheus-operator/prometheus-operator@v0.85.0
crds=(monitoring.coreos.com_podmonitors.yaml monitoring.coreos.com_prometheusrules.yaml)

fail() {
  echo "kube: $*" >&2
  # remembered for 10 minutes, so make test's attempt and the tests' own do
  # not each wait for an unreachable module proxy
  [ -n "${stamp_want:-}" ] && printf '%s\n%s\n' "$stamp_want" "$*" >"$dir/failed" 2>/dev/null || true
  exit 1
}

command -v go >/dev/null 2>&1 || fail "no go on PATH"
stamp_want="$(cd "$here" && cat go.mod go.sum setup.sh $(find cmd -name '*.go' | sort) <(go version) | sha256sum | cut -d' ' -f1)"

mkdir -p "$dir"
exec 9>"$dir/lock"
flock 9 2>/dev/null || true
complete() {
  [ -f "$dir/stamp" ] && [ "$(cat "$dir/stamp")" = "$stamp_want" ] || return 1
  for t in "${tools[@]}"; do [ -x "$bin/$t" ] || return 1; done
  for f in "${crds[@]}"; do [ -f "$dir/crds/$f" ] || return 1; done
}
if complete; then
  echo "$bin"
  exit 0
fi
if [ -f "$dir/failed" ] && [ "$(head -1 "$dir/failed")" = "$stamp_want" ] \
  && [ -z "$(find "$dir/failed" -mmin +10)" ] && [ "${KUBE_RETRY:-}" != 1 ]; then
  echo "kube: $(tail -n +2 "$dir/failed") (failed less than 10 minutes ago; KUBE_RETRY=1 to try now)" >&2
  exit 1
fi
rm -rf "$dir/stamp" "$dir/failed"
mkdir -p "$bin"
log="$dir/build.log"
: >"$log"
# The Kubernetes version the binaries report (helm checks a chart's
# kubeVersion against the server's): the module's, as its release builds set it.
kver="$(cd "$here" && go list -m -f '{{.Version}}' k8s.io/kubernetes)" || fail "go list -m k8s.io/kubernetes failed"
kminor="${kver#v1.}"; kminor="${kminor%%.*}"
ldflags="-X k8s.io/component-base/version.gitVersion=$kver -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$kminor -X k8s.io/component-base/version.gitTreeState=clean"
for t in "${tools[@]}"; do
  # -trimpath: no path of this machine in the binaries; one go build per
  # tool so a failure names it.
  (cd "$here" && go build -trimpath -ldflags="$ldflags" -o "$bin/$t.tmp" "./cmd/$t") >>"$log" 2>&1 \
    || fail "go build ./test/kube/cmd/$t failed (module proxy unreachable? out of memory?); see $log"
  mv "$bin/$t.tmp" "$bin/$t"
done
# The CRDs: read from the module cache (go mod download verifies the
# module against go.sum's checksum database), never committed here.
# (from an empty directory: outside any module, so no go.mod is touched)
empty="$(mktemp -d)"
moddir="$(cd "$empty" && go mod download -json "$promop" 2>>"$log" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
rmdir "$empty"
[ -n "$moddir" ] || fail "go mod download $promop failed; see $log"
mkdir -p "$dir/crds"
for f in "${crds[@]}"; do
  cp "$moddir/example/prometheus-operator-crd/$f" "$dir/crds/$f" || fail "$promop has no example/prometheus-operator-crd/$f"
done
echo "$stamp_want" >"$dir/stamp"
echo "$bin"
