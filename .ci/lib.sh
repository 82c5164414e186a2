# Shared by .ci/fast, .ci/slow and .ci/run (sourced, not run).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n=== %s (at %d s) ===\n' "$*" "$SECONDS"; }

# Installs the Debian packages named that are missing (sudo only when not root).
# Returns non-zero if the install fails; callers decide whether that is fatal.
need_pkgs() {
  local missing=() p sudo=""
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}"
}

# Tests that cannot run here pass but append `BINARY::TEST: REASON` to this file
# (`dynres_tests::skip`); `print_skipped` lists them, so a green run says what it did
# not test.
skipped_file="${CARGO_TARGET_DIR:-target}/skipped-tests.txt"

print_skipped() {
  step "skipped tests"
  if [ -s "$skipped_file" ]; then
    echo "skipped: $(wc -l < "$skipped_file") tests:"
    sed 's/^/  /' "$skipped_file"
  else
    echo "skipped: none"
  fi
}

# The verification workspace's command line (its own manifest, this target dir).
verify=(cargo run --release --locked --manifest-path verification/Cargo.toml --target-dir target --)
