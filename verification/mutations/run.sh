#!/usr/bin/env bash
# The unplanted-bug corpus (issue 33 goal 4): realistic bugs kept as patches outside the
# gate's planted-bug switches. Each patch is applied to a scratch copy of the source, and
# the gate and core's tests run against it; the table says what caught it:
#
#   property     a property of the gate failed (or a planted bug was no longer caught)
#   test         no property failed, but one of core's tests did
#   golden-only  only a golden state count drifted: a `--bless` would let it through
#   escaped      nothing saw it
#
# The goal: every patch caught by a property or a test, none by golden counts alone.
#
# Usage: verification/mutations/run.sh [--quick] [PATCH...]
#   --quick   run the gate only on the configurations a patch's `# configs:` line names
#             (substrings, as `check --only`), instead of the whole PR tier
#   PATCH...  patches to run (default: every verification/mutations/*.patch)
#
# Environment: DYNRES_MUTATION_DIR (scratch, default target/mutations), CARGO_TARGET_DIR
# for the scratch builds (default $DYNRES_MUTATION_DIR/target). The scratch builds use a
# target directory of their own on purpose: cargo hashes a workspace member by its path
# relative to the workspace root, so a copy building into the tree's own target/ would
# share — and overwrite — the tree's `dynres-core` artifacts and fingerprints, and a later
# build of the tree could link a mutant. The directory persists, so only the first patch
# pays for the dependencies.
set -u -o pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
quick=0
patches=()
for a in "$@"; do
    case $a in
    --quick) quick=1 ;;
    -h | --help)
        sed -n '2,25p' "$0"
        exit 0
        ;;
    *) patches+=("$(cd "$(dirname "$a")" && pwd)/$(basename "$a")") ;;
    esac
done
if [ ${#patches[@]} -eq 0 ]; then
    patches=("$root"/verification/mutations/*.patch)
fi
work=${DYNRES_MUTATION_DIR:-$root/target/mutations}
mkdir -p "$work" && work=$(cd "$work" && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$work/target}
export CARGO_INCREMENTAL=0 PROPTEST_CASES=${PROPTEST_CASES:-32}
src=$work/src
logs=$work/logs/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$src" "$logs"

rows=()
for patch in "${patches[@]}"; do
    name=$(basename "$patch" .patch)
    log=$logs/$name.log
    echo "== $name (log: $log)"
    # A fresh copy of the tree as it is (committed or not), without build outputs.
    rm -rf "$src" && mkdir -p "$src"
    tar -C "$root" --exclude=./target --exclude=./.git -cf - . | tar -C "$src" -xf -
    # patch(1), not `git apply`: the scratch directory may lie inside the repository
    # (target/ is), where `git apply` silently skips paths outside the current directory.
    if ! (cd "$src" && patch -p1 --forward --batch <"$patch") >>"$log" 2>&1; then
        rows+=("$name|-|-|-|does not apply")
        continue
    fi
    # The kernel's tests: its unit tests and the in-memory harness (core/tests).
    if (cd "$src" && cargo test -q -p dynres-core --lib --test kernel) >>"$log" 2>&1; then
        test=pass
    else
        test=FAIL
    fi
    gate_log=$logs/$name.gate.log
    : >"$gate_log"
    if [ $quick = 1 ]; then
        only=$(sed -n 's/.*configs: *//p' "$patch" | head -1)
        for o in $only; do
            (cd "$src" && cargo run -q --release --manifest-path verification/Cargo.toml -- \
                check --tier pr --only "$o") >>"$gate_log" 2>&1
        done
    else
        (cd "$src" && cargo run -q --release --manifest-path verification/Cargo.toml -- \
            check --tier pr) >>"$gate_log" 2>&1
    fi
    # Rows of failed configurations, planted bugs missed, golden drift.
    property=$(grep -cE '  (FAIL \(|BOUND HIT)|  MISSED$' "$gate_log")
    golden=$(grep -c '^golden: .* explored' "$gate_log")
    built=$(grep -c '^config ' "$gate_log")
    if [ "$built" = 0 ]; then
        verdict="gate did not run (see log)"
    elif [ "$property" -gt 0 ]; then
        verdict=caught-by-property
    elif [ $test = FAIL ]; then
        verdict=caught-by-test
    elif [ "$golden" -gt 0 ]; then
        verdict=GOLDEN-ONLY
    else
        verdict=ESCAPED
    fi
    failed=$(grep -oE 'property "[^"]*" violated' "$gate_log" | sort -u | sed 's/property "\(.*\)" violated/\1/' | head -3 | paste -sd ';' -)
    rows+=("$name|$property|$test|$golden|$verdict|$failed")
    # Each verdict as it comes (a long run can be read before it ends).
    echo "$name: $verdict (gate failures $property, core tests $test, golden drifts $golden) $failed" |
        tee -a "$logs/progress.txt"
done

printf '\n%-42s %9s %5s %7s  %-20s %s\n' patch "gate-fail" test golden verdict "first properties failed"
for r in "${rows[@]}"; do
    IFS='|' read -r n p t g v f <<<"$r"
    printf '%-42s %9s %5s %7s  %-20s %s\n' "$n" "$p" "$t" "$g" "$v" "${f:-}"
done | tee "$logs/summary.txt"
# Non-zero if anything was seen only by golden counts or not at all.
! grep -qE 'GOLDEN-ONLY|ESCAPED|does not apply|did not run' "$logs/summary.txt"
