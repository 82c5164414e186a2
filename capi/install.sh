#!/usr/bin/env bash
# Builds libdynres and the `dynres` command and installs them for C, C++ and Fortran
# programs:
#   PREFIX/include/dynres.h, PREFIX/lib/libdynres.{a,so}, PREFIX/lib/pkgconfig/dynres.pc,
#   PREFIX/bin/dynres (to run the programs), PREFIX/share/man/man1/dynres.1,
#   PREFIX/share/bash-completion/completions/dynres, PREFIX/share/zsh/site-functions/_dynres
# usage: capi/install.sh PREFIX [--release]
# Then: PKG_CONFIG_PATH=PREFIX/lib/pkgconfig cc prog.c $(pkg-config --cflags --libs dynres)
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 PREFIX [--release]" >&2
  exit 2
fi
prefix=$(mkdir -p "$1" && cd "$1" && pwd)
profile=dev
out=debug
if [ "${2:-}" = "--release" ]; then
  profile=release
  out=release
fi
cd "$(dirname "$0")/.."
# Two builds: `--bin` selects targets in every named package, so one command with
# `-p dynres-capi --bin dynres` would leave libdynres unbuilt on a clean checkout.
cargo build -p dynres-capi --lib --locked --profile "$profile"
cargo build -p dynres-launcher --bin dynres --locked --profile "$profile"
target="${CARGO_TARGET_DIR:-target}/$out"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
mkdir -p "$prefix/include" "$prefix/lib/pkgconfig" "$prefix/bin" "$prefix/share/man/man1" \
  "$prefix/share/bash-completion/completions" "$prefix/share/zsh/site-functions"
install -m 0755 "$target/dynres" "$prefix/bin/dynres"
# The man page and completions come from the CLI definition itself.
"$prefix/bin/dynres" manpage >"$prefix/share/man/man1/dynres.1"
"$prefix/bin/dynres" completions bash >"$prefix/share/bash-completion/completions/dynres"
"$prefix/bin/dynres" completions zsh >"$prefix/share/zsh/site-functions/_dynres"
install -m 0644 capi/include/dynres.h "$prefix/include/dynres.h"
install -m 0644 "$target/libdynres.a" "$prefix/lib/libdynres.a"
install -m 0755 "$target/libdynres.so" "$prefix/lib/libdynres.so"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" capi/dynres.pc.in \
  >"$prefix/lib/pkgconfig/dynres.pc"
echo "installed dynres $version into $prefix"
