#!/usr/bin/env bash
# Creates (once) the virtualenv the SDK end-to-end tests run the real
# Supervaizer SDK server from: build/sdkagent/venv at the repository root
# (ignored by git), from the hash-pinned requirements in this folder, with the
# syntax backports of backport.py. A stamp (sha256 of the requirements files,
# backport.py and the Python version) says the virtualenv is complete; when
# any of them changes the virtualenv is made again. On success prints the
# virtualenv's python; on failure prints one line naming why and exits 1.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
dir="${SDKAGENT_DIR:-$root/build/sdkagent}"
venv="$dir/venv"
py="${SDKAGENT_PYTHON:-python3}"

fail() {
  echo "sdkagent: $*" >&2
  # remembered for 10 minutes, so make test's attempt and the tests' own
  # do not each wait for an unreachable package index
  [ -n "${stamp_want:-}" ] && printf '%s\n%s\n' "$stamp_want" "$*" >"$dir/failed" 2>/dev/null || true
  exit 1
}

command -v "$py" >/dev/null 2>&1 || fail "no $py on PATH"
ver="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
[ "$ver" = "3.11" ] || [ "$ver" = "3.12" ] || [ "$ver" = "3.13" ] || fail "$py is Python $ver; the pinned wheels are for CPython 3.11"
stamp_want="$(cat "$here/requirements.txt" "$here/build-requirements.txt" "$here/backport.py" <("$py" -V) | sha256sum | cut -d' ' -f1)"

mkdir -p "$dir"
exec 9>"$dir/lock"
flock 9 2>/dev/null || true
if [ -f "$dir/stamp" ] && [ "$(cat "$dir/stamp")" = "$stamp_want" ] && [ -x "$venv/bin/python" ]; then
  echo "$venv/bin/python"
  exit 0
fi
if [ -f "$dir/failed" ] && [ "$(head -1 "$dir/failed")" = "$stamp_want" ] \
  && [ -z "$(find "$dir/failed" -mmin +10)" ] && [ "${SDKAGENT_RETRY:-}" != 1 ]; then
  echo "sdkagent: $(tail -n +2 "$dir/failed") (failed less than 10 minutes ago; SDKAGENT_RETRY=1 to try now)" >&2
  exit 1
fi
rm -rf "$venv" "$dir/stamp" "$dir/failed"
log="$dir/setup.log"
"$py" -m venv "$venv" >"$log" 2>&1 || fail "python3 -m venv failed (Debian: apt-get install python3-venv); see $log"
pip=("$venv/bin/python" -m pip --disable-pip-version-check --no-input)
"${pip[@]}" install --require-hashes --no-deps -r "$here/build-requirements.txt" >>"$log" 2>&1 \
  || fail "pip could not install build-requirements.txt (package index unreachable?); see $log"
"${pip[@]}" install --require-hashes --no-deps --ignore-requires-python --no-build-isolation \
  -r "$here/requirements.txt" >>"$log" 2>&1 \
  || fail "pip could not install requirements.txt (package index unreachable?); see $log"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [ "$ver" = "3.11" ]; then
  "$venv/bin/python" "$here/backport.py" "$site" >>"$log" 2>&1 || fail "$(tail -1 "$log")"
fi
"$venv/bin/python" -c 'import supervaizer.server' >>"$log" 2>&1 || fail "supervaizer does not import; see $log"
echo "$stamp_want" >"$dir/stamp"
echo "$venv/bin/python"
