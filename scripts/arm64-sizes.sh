#!/usr/bin/env bash
# The stripped sizes of the four function binaries as Lambda runs them (release profile,
# aarch64-unknown-linux-gnu), on an x86_64 machine that cannot fetch rustup's arm64 standard
# library (static.rust-lang.org): the standard library is built from source instead
# (`-Zbuild-std`), from Debian's `rust-src` package of exactly this rustc's version, with
# Debian's aarch64 cross gcc as the linker and the C compiler of aws-lc.
#
#   scripts/arm64-sizes.sh            # prints one line per function; build in target/
#
# Needs: Debian's package archive (deb.debian.org, for `rust-src` and, run as root, for
# `gcc-aarch64-linux-gnu` when it is missing). `RUSTC_BOOTSTRAP=1` lets the stable compiler
# take `-Zbuild-std`; nothing is installed into the toolchain (cargo is pointed at the source
# with `__CARGO_TESTS_ONLY_SRC_ROOT`).
#
# Where rustup's target can be had, use it instead (`scripts/sam-build.sh` prints the sizes of
# what it builds). Measured on x86_64, the same build with the standard library built from
# source came out within 0.02 MB of the one with rustup's (mcp 15.80 vs 15.81 MB, sweep 10.81
# both). The linker is gcc's here and Zig's under cargo-lambda, which may differ slightly.
set -euo pipefail

TARGET=aarch64-unknown-linux-gnu
FUNCTIONS=(mcp tasks worker sweep)
# Suites searched for `rust-src` of this rustc's version, newest backports first.
SUITES=(trixie-backports sid forky trixie experimental)
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
target_dir=$(realpath -m "${CARGO_TARGET_DIR:-$root/target}")
work="$target_dir/arm64-sizes"
mkdir -p "$work"

version=$(rustc --version | awk '{print $2}')
src="$work/rust-src-$version/usr/src/rustc-$version/library"
if [[ ! -d $src ]]; then
  deb=""
  for suite in "${SUITES[@]}"; do
    index="$work/Packages-$suite"
    if [[ ! -s $index ]]; then
      curl -fsS -m 120 "$MIRROR/dists/$suite/main/binary-all/Packages.xz" | xz -dc >"$index" ||
        { rm -f "$index"; continue; }
    fi
    deb=$(awk -v want="$version" '
      /^Package: /  { pkg = $2 }
      /^Version: /  { ver = $2 }
      /^Filename: / { if (pkg == "rust-src" && index(ver, want "+") == 1) { print $2; exit } }
    ' "$index")
    [[ -n $deb ]] && break
  done
  if [[ -z $deb ]]; then
    echo "arm64-sizes: no Debian rust-src $version in ${SUITES[*]}" >&2
    exit 1
  fi
  echo "arm64-sizes: standard library source from $MIRROR/$deb" >&2
  curl -fsS -m 600 -o "$work/rust-src.deb" "$MIRROR/$deb"
  dpkg-deb -x "$work/rust-src.deb" "$work/rust-src-$version"
  rm "$work/rust-src.deb"
fi

if ! command -v aarch64-linux-gnu-gcc >/dev/null; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "arm64-sizes: needs aarch64-linux-gnu-gcc (apt-get install gcc-aarch64-linux-gnu)" >&2
    exit 1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q gcc-aarch64-linux-gnu >&2
fi

packages=()
for f in "${FUNCTIONS[@]}"; do packages+=(-p "mcp-tasks-$f"); done
RUSTC_BOOTSTRAP=1 __CARGO_TESTS_ONLY_SRC_ROOT="$src" \
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
  CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc \
  AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar \
  CARGO_TARGET_DIR="$target_dir" \
  cargo build --release -Zbuild-std=std,panic_unwind --target "$TARGET" "${packages[@]}" >&2

echo "arm64-sizes: release binaries, $TARGET, rustc $version:"
for f in "${FUNCTIONS[@]}"; do
  bytes=$(stat -c %s "$target_dir/$TARGET/release/$f")
  awk -v f="$f" -v b="$bytes" 'BEGIN { printf "  %-7s %10d bytes  %6.2f MB\n", f, b, b / 1e6 }'
done
