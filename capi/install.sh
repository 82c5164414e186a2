#!/usr/bin/env bash
# Builds libdynres and installs it for C, C++ and Fortran programs:
#   PREFIX/include/dynres.h, PREFIX/lib/libdynres.{a,so}, PREFIX/lib/pkgconfig/dynres.pc
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
cargo build -p dynres-capi --locked --profile "$profile"
target="${CARGO_TARGET_DIR:-target}/$out"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
mkdir -p "$prefix/include" "$prefix/lib/pkgconfig"
install -m 0644 capi/include/dynres.h "$prefix/include/dynres.h"
install -m 0644 "$target/libdynres.a" "$prefix/lib/libdynres.a"
install -m 0755 "$target/libdynres.so" "$prefix/lib/libdynres.so"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" capi/dynres.pc.in \
  >"$prefix/lib/pkgconfig/dynres.pc"
echo "installed dynres $version into $prefix"
