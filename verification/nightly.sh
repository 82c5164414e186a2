#!/usr/bin/env bash
# verification/nightly.sh: the scheduled long-running checks (issue 13, spec/verification.md §7).
#
#   gate     the merge gate's nightly tier (cargo run --release --manifest-path
#            verification/Cargo.toml -- check --tier nightly)
#   fuzz     every cargo-fuzz target of core/fuzz and transports/fuzz, -runs=N inputs each
#            from its seeds (core/fuzz/seeds/<target>, transports/fuzz/seeds/<target>);
#            any crash (panic, failed assertion, overflow, OOM, timeout) fails the stage
#   mutants  cargo-mutants over dynres-core (.cargo/mutants.toml), kill rate
#            caught / (caught + missed) must be >= DYNRES_KILL_RATE_MIN (90)
#   corpus   the unplanted-bug corpus (verification/mutations/run.sh, issue 33): every
#            patch must be caught by a property or a test, none by golden counts alone
#            (--quick: only each patch's own configurations)
#
# then ONE summary table, and a non-zero exit if any stage failed.
#
# Usage: verification/nightly.sh [--quick] [--stages gate,fuzz,mutants,corpus] [--help]
#
#   --quick        smoke test in minutes: 100,000 fuzz inputs per target, mutants
#                  shard 0/100 (20 of 2,000), the gate's nightly tier only for
#                  DYNRES_GATE_ONLY (default rc-sub-2n-4e). Every stage still runs.
#   --stages LIST  run only these stages (comma-separated), e.g. --stages fuzz
#
# Environment (all optional):
#   DYNRES_FUZZ_RUNS       inputs per fuzz target (default 10000000; --quick: 100000)
#   DYNRES_FUZZ_TARGETS    only these fuzz targets (space-separated names)
#   DYNRES_MUTANTS_SHARD   k/n: run one shard, every n-th mutant (default: all; --quick: 0/100)
#   DYNRES_MUTANTS_ARGS    extra cargo-mutants arguments, e.g. "-f core/src/pset/*.rs"
#   DYNRES_MUTANTS_JOBS    mutants built and tested at once (default 1)
#   DYNRES_KILL_RATE_MIN   minimal kill rate in percent (default 90)
#   DYNRES_GATE_ONLY       pass --only to the gate (a configuration name substring)
#   DYNRES_JOBS            cargo build jobs and gate threads (default 2)
#   DYNRES_NIGHTLY_DIR     where the logs go (default $CARGO_TARGET_DIR/nightly/<timestamp>)
#   CARGO_TARGET_DIR       build directory (default <repo>/target)
#
# Fuzzing on stable Rust. cargo-fuzz normally runs on nightly because its default
# AddressSanitizer needs -Zsanitizer. We build with `cargo fuzz build --sanitizer none
# --debug-assertions`: the coverage instrumentation cargo-fuzz then passes
# (-Cpasses=sancov-module, -Cllvm-args=-sanitizer-coverage-*, --cfg fuzzing) consists of
# stable rustc flags, so libFuzzer still gets its edge counters and compare traces (the
# log shows cov:/ft: growing), and no RUSTC_BOOTSTRAP is needed (cargo-fuzz 0.13 adds -Z
# flags only for a sanitizer, -Zbuild-std or --careful). The fuzz builds go to their own
# target directory ($CARGO_TARGET_DIR/fuzz, RUSTFLAGS differ). What is lost without ASan is
# memory-error detection in unsafe code, which the parsers (safe Rust) do not have;
# --debug-assertions keeps overflow checks and debug_assert! on, so those panic too.
set -euo pipefail

die() {
    echo "nightly.sh: $*" >&2
    exit 2
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

QUICK=0
STAGES="gate,fuzz,mutants,corpus"
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    --stages)
        [ $# -ge 2 ] || die "--stages needs a list, e.g. --stages fuzz,mutants"
        STAGES="$2"
        shift
        ;;
    --stages=*) STAGES="${1#--stages=}" ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *) die "unknown argument '$1' (try --help)" ;;
    esac
    shift
done
for s in ${STAGES//,/ }; do
    case "$s" in gate | fuzz | mutants | corpus) ;; *) die "unknown stage '$s' (gate, fuzz, mutants, corpus)" ;; esac
done
want() { [[ ",$STAGES," == *",$1,"* ]]; }

if [ "$QUICK" = 1 ]; then
    FUZZ_RUNS=${DYNRES_FUZZ_RUNS:-100000}
    MUTANTS_SHARD=${DYNRES_MUTANTS_SHARD:-0/100}
    GATE_ONLY=${DYNRES_GATE_ONLY:-rc-sub-2n-4e}
else
    FUZZ_RUNS=${DYNRES_FUZZ_RUNS:-10000000}
    MUTANTS_SHARD=${DYNRES_MUTANTS_SHARD:-}
    GATE_ONLY=${DYNRES_GATE_ONLY:-}
fi
[[ "$FUZZ_RUNS" =~ ^[0-9]+$ ]] && [ "$FUZZ_RUNS" -gt 0 ] || die "DYNRES_FUZZ_RUNS must be a positive integer, got '$FUZZ_RUNS'"
[ -z "$MUTANTS_SHARD" ] || [[ "$MUTANTS_SHARD" =~ ^[0-9]+/[1-9][0-9]*$ ]] || die "DYNRES_MUTANTS_SHARD must be k/n, got '$MUTANTS_SHARD'"
KILL_MIN=${DYNRES_KILL_RATE_MIN:-90}
[[ "$KILL_MIN" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "DYNRES_KILL_RATE_MIN must be a number, got '$KILL_MIN'"
JOBS=${DYNRES_JOBS:-2}
MUTANTS_JOBS=${DYNRES_MUTANTS_JOBS:-1}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
export CARGO_BUILD_JOBS=$JOBS
LOG=${DYNRES_NIGHTLY_DIR:-$CARGO_TARGET_DIR/nightly/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$LOG" || die "cannot create the log directory $LOG"
LOG=$(cd "$LOG" && pwd)
echo "nightly.sh: logs in $LOG"

export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
command -v cargo >/dev/null || die "cargo not found (install Rust: rustup, stable toolchain)"

# One row per stage or fuzz target: stage|what|result|numbers|seconds
ROWS=()
FAILED=0
row() { ROWS+=("$1|$2|$3|$4|$5"); }
fail() { FAILED=1; }

# Installs cargo-<tool> with `cargo install --locked` if it is missing.
need_tool() {
    local sub=$1 crate=$2
    if ! cargo "$sub" --version >/dev/null 2>&1; then
        echo "nightly.sh: installing $crate (cargo install --locked $crate)"
        cargo install --locked "$crate" >"$LOG/install-$crate.log" 2>&1 ||
            die "cargo install $crate failed, see $LOG/install-$crate.log"
    fi
}

# ---------------------------------------------------------------- gate
stage_gate() {
    local t0=$SECONDS args=(check --tier nightly --threads "$JOBS" --json "$LOG/gate.json")
    [ -z "$GATE_ONLY" ] || args+=(--only "$GATE_ONLY")
    echo "nightly.sh: gate: check ${args[*]:1} (log: $LOG/gate.log)"
    local rc=0
    cargo run --release -j "$JOBS" --manifest-path verification/Cargo.toml -- "${args[@]}" \
        >"$LOG/gate.log" 2>&1 || rc=$?
    local dt=$((SECONDS - t0))
    local total=0 passed=0 planted=""
    if [ -s "$LOG/gate.json" ]; then
        total=$(grep -c '"config":' "$LOG/gate.json" || true)
        passed=$(grep -c '"passed": true' "$LOG/gate.json" || true)
    fi
    planted=$(sed -n 's/^planted bugs caught: //p' "$LOG/gate.log" | tail -1)
    local what="tier nightly${GATE_ONLY:+ --only $GATE_ONLY}"
    local nums="configs ok $passed/$total, planted caught ${planted:-?}"
    if [ "$rc" = 0 ]; then
        row gate "$what" ok "$nums" "$dt"
    else
        row gate "$what" "FAIL (exit $rc)" "$nums; see gate.log" "$dt"
        fail
    fi
}

# ---------------------------------------------------------------- fuzz
fuzz_one() { # crate-dir target
    local dir=$1 t=$2 bin=$3 t0
    t0=$(date +%s.%N)
    local out="$LOG/fuzz/$t" seeds="$ROOT/$dir/seeds/$t"
    mkdir -p "$out/corpus" "$out/artifacts"
    local corpora=("$out/corpus") seeded="no seeds"
    if [ -d "$seeds" ] && [ -n "$(ls -A "$seeds")" ]; then
        corpora+=("$seeds")
        seeded="$(ls -A "$seeds" | wc -l) seeds"
    fi
    echo "nightly.sh: fuzz $t: $FUZZ_RUNS inputs from $seeded (log: $out/fuzz.log)"
    local rc=0
    # The first corpus directory is written to (new inputs); the seeds are only read.
    "$bin" "${corpora[@]}" -runs="$FUZZ_RUNS" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$out/artifacts/" >"$out/fuzz.log" 2>&1 || rc=$?
    local dt runs eps cov ft
    dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/fuzz.log" | tail -1)
    # libFuzzer's own average_exec_per_sec is per whole second (0 for a sub-second run).
    eps=$(awk -v n="${runs:-0}" -v s="$dt" 'BEGIN { printf "%d", (s > 0) ? n / s : 0 }')
    cov=$(grep -o 'cov: [0-9]*' "$out/fuzz.log" | tail -1 | cut -d' ' -f2)
    ft=$(grep -o 'ft: [0-9]*' "$out/fuzz.log" | tail -1 | cut -d' ' -f2)
    local crashes
    crashes=$(find "$out/artifacts" -type f | wc -l)
    local nums="inputs ${runs:-?}, ${eps:-?} exec/s, cov ${cov:-?} ft ${ft:-?}, crashes $crashes"
    if [ "$rc" = 0 ] && [ "$crashes" = 0 ] && [ "${runs:-0}" -ge "$FUZZ_RUNS" ]; then
        row fuzz "$dir $t" ok "$nums" "$dt"
    else
        local why="exit $rc"
        [ "$crashes" = 0 ] || why="crash"
        [ "$rc" != 0 ] || [ "$crashes" != 0 ] || why="ran ${runs:-0} < $FUZZ_RUNS"
        row fuzz "$dir $t" "FAIL ($why)" "$nums" "$dt"
        local a
        for a in "$out"/artifacts/*; do
            [ -f "$a" ] || continue
            echo "nightly.sh: fuzz $t: crash input $a (hex: $(od -An -tx1 -v "$a" | tr -d ' \n' | cut -c1-512))" >&2
        done
        grep -m1 -A2 "panicked at" "$out/fuzz.log" >&2 || true
        fail
    fi
}

stage_fuzz() {
    need_tool fuzz cargo-fuzz
    local triple
    triple=$(rustc -vV | sed -n 's/^host: //p')
    local dir t
    for dir in core/fuzz transports/fuzz; do
        local t0=$SECONDS targets=()
        for t in "$ROOT/$dir"/fuzz_targets/*.rs; do
            t=$(basename "$t" .rs)
            if [ -n "${DYNRES_FUZZ_TARGETS:-}" ] && [[ " $DYNRES_FUZZ_TARGETS " != *" $t "* ]]; then
                continue
            fi
            targets+=("$t")
        done
        [ ${#targets[@]} -gt 0 ] || continue
        echo "nightly.sh: fuzz: building $dir (log: $LOG/fuzz-build-${dir%%/*}.log)"
        # See the head of this file: stable rustc, no sanitizer, coverage + debug assertions.
        if ! (cd "$dir" && cargo fuzz build --sanitizer none --debug-assertions \
            --target-dir "$CARGO_TARGET_DIR/fuzz") >"$LOG/fuzz-build-${dir%%/*}.log" 2>&1; then
            row fuzz "$dir (build)" "FAIL (build)" "see fuzz-build-${dir%%/*}.log" $((SECONDS - t0))
            fail
            continue
        fi
        for t in "${targets[@]}"; do
            local bin="$CARGO_TARGET_DIR/fuzz/$triple/release/$t"
            if [ ! -x "$bin" ]; then
                row fuzz "$dir $t" "FAIL (no binary)" "$bin missing" 0
                fail
                continue
            fi
            fuzz_one "$dir" "$t" "$bin"
        done
    done
}

# ---------------------------------------------------------------- mutants
stage_mutants() {
    need_tool mutants cargo-mutants
    local t0=$SECONDS args=(mutants -p dynres-core -j "$MUTANTS_JOBS" --output "$LOG/mutants")
    # round-robin: shard k/n is every n-th mutant from the k-th, a sample across all files
    # (cargo-mutants' default `slice` would give the first n-th of the list, a few files).
    [ -z "$MUTANTS_SHARD" ] || args+=(--shard "$MUTANTS_SHARD" --sharding round-robin)
    if [ -n "${DYNRES_MUTANTS_ARGS:-}" ]; then
        # Split the extra arguments on blanks but leave their globs to cargo-mutants.
        local extra
        set -f
        read -r -a extra <<<"$DYNRES_MUTANTS_ARGS"
        set +f
        args+=("${extra[@]}")
    fi
    mkdir -p "$LOG/mutants"
    echo "nightly.sh: mutants: cargo ${args[*]} (log: $LOG/mutants.log)"
    local rc=0
    # Each cargo-mutants build directory (a copy of the tree) gets its own target/: the
    # shared CARGO_TARGET_DIR would be rebuilt for every mutant's path anyway.
    (unset CARGO_TARGET_DIR && PROPTEST_CASES=32 cargo "${args[@]}") >"$LOG/mutants.log" 2>&1 || rc=$?
    local dt=$((SECONDS - t0))
    local out="$LOG/mutants/mutants.out"
    # The extra arguments (often a list of -f globs) are in the log, not the table.
    local scope="dynres-core${MUTANTS_SHARD:+ shard $MUTANTS_SHARD}${DYNRES_MUTANTS_ARGS:+ (+ DYNRES_MUTANTS_ARGS)}"
    # 0 all caught, 2 some missed, 3 some timed out: the run itself completed.
    if [ ! -s "$out/outcomes.json" ] || { [ "$rc" != 0 ] && [ "$rc" != 2 ] && [ "$rc" != 3 ]; }; then
        local why="exit $rc"
        [ "$rc" != 4 ] || why="baseline tests fail"
        row mutants "$scope" "FAIL ($why)" "see mutants.log" "$dt"
        fail
        return
    fi
    # cargo-mutants lists each mutant by outcome, one per line, beside outcomes.json.
    count() { if [ -f "$out/$1.txt" ]; then wc -l <"$out/$1.txt" | tr -d ' '; else echo 0; fi; }
    local caught missed unviable timeout total
    caught=$(count caught)
    missed=$(count missed)
    unviable=$(count unviable)
    timeout=$(count timeout)
    total=$((caught + missed + unviable + timeout))
    local rate="n/a" ok=1
    if [ $((caught + missed)) -gt 0 ]; then
        rate=$(awk -v c="$caught" -v m="$missed" 'BEGIN { printf "%.1f", 100 * c / (c + m) }')
        awk -v r="$rate" -v min="$KILL_MIN" 'BEGIN { exit !(r >= min) }' || ok=0
    fi
    local nums="$total mutants: caught $caught, missed $missed, unviable $unviable, timeout $timeout; kill rate $rate %"
    if [ "$ok" = 1 ]; then
        row mutants "$scope" ok "$nums" "$dt"
    else
        row mutants "$scope" "FAIL (kill rate < $KILL_MIN %)" "$nums" "$dt"
        fail
    fi
    if [ "$missed" -gt 0 ]; then
        echo "nightly.sh: mutants: missed ($out/missed.txt):" >&2
        sed 's/^/  /' "$out/missed.txt" >&2
    fi
}

# ---------------------------------------------------------------- corpus
stage_corpus() {
    local t0=$SECONDS rc=0 args=()
    [ "$QUICK" = 1 ] && args+=(--quick)
    echo "nightly.sh: corpus: verification/mutations/run.sh ${args[*]} (log: $LOG/corpus.log)"
    # Its own scratch and target directory (see run.sh), under this run's logs' parent.
    DYNRES_MUTATION_DIR="${CARGO_TARGET_DIR:-target}/mutations" CARGO_TARGET_DIR= \
        verification/mutations/run.sh "${args[@]}" >"$LOG/corpus.log" 2>&1 || rc=$?
    local dt=$((SECONDS - t0)) n caught
    n=$(grep -c ': .* (gate failures' "$LOG/corpus.log" || true)
    caught=$(grep -cE ': caught-by-(property|test) ' "$LOG/corpus.log" || true)
    if [ "$rc" = 0 ]; then
        row corpus "unplanted bugs" ok "caught $caught/$n" "$dt"
    else
        row corpus "unplanted bugs" "FAIL (exit $rc)" "caught $caught/$n; see corpus.log" "$dt"
        fail
    fi
}

main() {
    local t0=$SECONDS verdict
    if want gate; then stage_gate; fi
    if want fuzz; then stage_fuzz; fi
    if want mutants; then stage_mutants; fi
    if want corpus; then stage_corpus; fi
    # ------------------------------------------------------------ summary
    if [ "$FAILED" = 0 ]; then verdict=PASS; else verdict=FAIL; fi
    {
        echo
        printf '%-8s %-34s %-24s %8s  %s\n' stage what result seconds numbers
        local r s w res n sec
        for r in "${ROWS[@]}"; do
            IFS='|' read -r s w res n sec <<<"$r"
            printf '%-8s %-34s %-24s %8s  %s\n' "$s" "$w" "$res" "$sec" "$n"
        done
        echo "nightly: $verdict in $((SECONDS - t0)) s (stages: $STAGES$([ "$QUICK" = 1 ] && echo ', quick')); logs: $LOG"
    } | tee "$LOG/summary.txt"
    return "$FAILED"
}

# One line, read whole before it runs: editing this file during a run is harmless.
main; exit $?
