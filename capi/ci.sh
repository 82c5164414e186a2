#!/usr/bin/env bash
# CI of the C ABI (issue 14), called from .ci/run; also runs on its own: bash capi/ci.sh
#
# 1. the checked-in header is what cbindgen makes of capi/src today;
# 2. libdynres and dynres.pc install into a temporary prefix (capi/install.sh);
# 3. capi/examples/toy_runtime.c (master + daemons + clients in one process, an ADD and a
#    SUB to FINALIZED in memory) builds with gcc -Wall -Werror against the static library
#    and runs under AddressSanitizer (leaks included);
# 4. capi/examples/synthetic.c (the Lst. 6.7 loop) builds against the shared library via
#    pkg-config and runs under `dynres run`, under AddressSanitizer, growing and
#    shrinking: non-blocking and blocking accept; the guide's malleable loop
#    (capi/examples/malleable.c, docs/guide.md) under `dynres run`, grown, shrunk and
#    replaced from outside with the installed `dynres` command;
# 5. the same loops in Fortran (capi/examples/{dynres,synthetic,malleable}.f90) if
#    gfortran is there (it is installed when missing and the package manager can;
#    otherwise the step says "skipped: gfortran not installed").
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

started=$SECONDS
step() { printf '\n--- capi: %s (at %d s) ---\n' "$*" "$((SECONDS - started))"; }


step "system packages (pkg-config; gfortran if it can be had)"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=()
for p in pkg-config gfortran; do installed "$p" || missing+=("$p"); done
if [ "${#missing[@]}" -gt 0 ]; then
  $sudo apt-get update -qq || true
  # pkg-config is required; gfortran is optional (step 5 is skipped without it).
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}" ||
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends pkg-config
fi

step "header drift (include/dynres.h against cbindgen's output)"
if ! cargo test -p dynres-capi --locked --test header -q; then
  echo "capi/ci.sh: capi/include/dynres.h differs from what cbindgen generates from capi/src." >&2
  echo "Regenerate it: DYNRES_BLESS_HEADER=1 cargo test -p dynres-capi --test header" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

step "install libdynres, dynres.h, dynres.pc, the dynres command, its man page and completions into a temporary prefix"
bash capi/install.sh "$prefix"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
pkg-config --modversion dynres
# The installed command runs the C programs below; its man page and completions are
# generated from the CLI definition.
dynres="$prefix/bin/dynres"
grep -q '^\.TH dynres 1' "$prefix/share/man/man1/dynres.1"
grep -q 'grow' "$prefix/share/bash-completion/completions/dynres"
grep -q '#compdef dynres' "$prefix/share/zsh/site-functions/_dynres"

cflags=(-std=c11 -Wall -Wextra -Werror -g -fsanitize=address -fno-omit-frame-pointer)
# LeakSanitizer on, and a failure is a non-zero exit of the process.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:exitcode=23"

step "toy runtime: gcc -Wall -Werror, static libdynres.a, AddressSanitizer"
# Static: the archive first, then what the Rust runtime needs (Libs.private).
private=$(pkg-config --static --libs-only-l dynres | tr ' ' '\n' | grep -v '^-ldynres$' | tr '\n' ' ')
# shellcheck disable=SC2046,SC2086
gcc "${cflags[@]}" $(pkg-config --cflags dynres) capi/examples/toy_runtime.c \
  "$prefix/lib/libdynres.a" $private -o "$work/toy_runtime"
"$work/toy_runtime" | tee "$work/toy.out"
grep -q '^toy_runtime: ok$' "$work/toy.out"

# Runs a synthetic-loop program under `dynres run` and checks the sizes it went through.
run_loop() {
  local prog=$1 plan=$2 sizes=$3
  shift 3
  local out="$work/$(basename "$prog").out"
  echo "dynres run -n 2 --max 8 -- $(basename "$prog") $plan $*"
  if ! DYNRES_RUNTIME_DIR="$work/run" timeout 300 "$dynres" run -n 2 --max 8 \
    -- "$prog" "$plan" "$@" >"$out" 2>&1; then
    cat "$out"
    echo "capi/ci.sh: $(basename "$prog") failed under dynres run" >&2
    return 1
  fi
  grep -E '^\[rank 0\] (iteration|[0-9]+,)' "$out" || true
  if ! grep -q "sizes $sizes as planned" "$out"; then
    cat "$out"
    echo "capi/ci.sh: $(basename "$prog") did not go through sizes $sizes" >&2
    return 1
  fi
  grep "as planned" "$out"
}
mkdir -m 0700 "$work/run"

step "synthetic loop in C under dynres run (shared libdynres.so via pkg-config, ASan)"
# shellcheck disable=SC2046
gcc "${cflags[@]}" capi/examples/synthetic.c $(pkg-config --cflags --libs dynres) \
  -Wl,-rpath,"$prefix/lib" -o "$work/synthetic"
run_loop "$work/synthetic" "+2,-2,+3,-3" "2 4 2 5 2" 10 2
run_loop "$work/synthetic" "+3,-3,+6,-6" "2 5 2 8 2" 10 2 -b

# Runs a guide loop (docs/guide.md) under `dynres run -n 2` and changes it from outside:
# grow +2, shrink -1, replace -1 +1, then stop; checks what the root printed.
guide_loop() {
  local prog=$1 job=$2
  local out="$work/$job.out" stop="$work/$job.stop" dir="$work/run"
  echo "dynres run -n 2 --max 6 --job-id $job -- $(basename "$prog") STOPFILE; grow, shrink, replace from outside"
  DYNRES_RUNTIME_DIR="$dir" timeout 300 "$dynres" run -n 2 --max 6 --job-id "$job" -- "$prog" "$stop" \
    >"$out" 2>&1 &
  local pid=$!
  for _ in $(seq 300); do
    DYNRES_RUNTIME_DIR="$dir" "$dynres" status "$job" 2>/dev/null | grep -c ' running$' | grep -qx 2 && break
    sleep 0.1
  done
  local ok=1
  DYNRES_RUNTIME_DIR="$dir" "$dynres" grow "$job" +2 || ok=0
  DYNRES_RUNTIME_DIR="$dir" "$dynres" shrink "$job" -1 || ok=0
  DYNRES_RUNTIME_DIR="$dir" "$dynres" replace "$job" -1 +1 || ok=0
  touch "$stop"
  wait "$pid" || ok=0
  grep '^\[rank 0\] malleable' "$out" || true
  for want in "ADD finalized, size 4" "SUB finalized, size 3" "REPLACE finalized, size 3" "stopped at"; do
    grep -q "\[rank 0\] malleable: $want" "$out" || ok=0
  done
  if [ "$ok" != 1 ]; then
    cat "$out"
    echo "capi/ci.sh: $(basename "$prog") did not grow, shrink and replace as asked" >&2
    return 1
  fi
}

step "the guide's malleable loop in C (grow, shrink, replace from outside; ASan)"
# shellcheck disable=SC2046
gcc "${cflags[@]}" capi/examples/malleable.c $(pkg-config --cflags --libs dynres) \
  -Wl,-rpath,"$prefix/lib" -o "$work/malleable"
guide_loop "$work/malleable" guide-c

step "synthetic loop and the guide's malleable loop in Fortran (ISO_C_BINDING) under dynres run"
if command -v gfortran >/dev/null; then
  # shellcheck disable=SC2046
  gfortran -std=f2018 -Wall -Werror -g -fsanitize=address -J "$work" capi/examples/dynres.f90 \
    capi/examples/synthetic.f90 $(pkg-config --cflags --libs dynres) -Wl,-rpath,"$prefix/lib" \
    -o "$work/synthetic_f"
  run_loop "$work/synthetic_f" "+2,-2,+3,-3" "2 4 2 5 2" 10 2 -b
  # shellcheck disable=SC2046
  gfortran -std=f2018 -Wall -Werror -g -fsanitize=address -J "$work" capi/examples/dynres.f90 \
    capi/examples/malleable.f90 $(pkg-config --cflags --libs dynres) -Wl,-rpath,"$prefix/lib" \
    -o "$work/malleable_f"
  guide_loop "$work/malleable_f" guide-f
else
  echo "skipped: gfortran not installed"
fi

echo
echo "capi/ci.sh: all passed in $((SECONDS - started)) s"
