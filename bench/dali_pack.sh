#!/usr/bin/env bash
# Packs DALI and the wheels it needs beyond a device image into few carry-sized parts, for
# bench/gpu_checks.sh on a lent GPU machine (a call carries 64 MiB; DALI's wheel alone is 424 MB,
# nine calls as plain parts). Here, where pip has a registry:
#   bench/dali_pack.sh WHEELS OUT
# WHEELS holds nvidia_dali_cuda120-2.4.0-...whl and its device-side needs (nvidia-libnvcomp-cu12,
# optree, libcst, nvtx, gast, astunparse, makefun: cp312 builds at requirements.txt's pins).
# Every wheel must hash to a SHA-256 the lock lists under its pin (trainer/requirements.lock).
# Every wheel is unpacked into one tree, less what no run here loads (C++ headers; the extension
# modules built for other Pythons than the device's 3.12), and the tree is compressed with xz
# (746 MB of files become about 235 MB, against the wheels' 470) and split into parts of PART_MIB
# (default 57) in OUT/0, OUT/1, ... Each part then travels in a call of its own (carry [OUT/N],
# command `mkdir -p .dali-store && cp OUT/N/* .dali-store/`); gpu_checks.sh joins them, unpacks the
# tree into a folder of its own, checks every file against its wheel's RECORD and only then adds it
# to what the checks import.
set -euo pipefail
if [ $# -ne 2 ]; then echo "usage: bench/dali_pack.sh WHEELS OUT" >&2; exit 2; fi
wheels=$1
out=$2
part_mib=${PART_MIB:-57}
case "$part_mib" in ''|*[!0-9]*|0) echo "error: PART_MIB: '$part_mib' is not a whole number of MiB above 0" >&2; exit 2;; esac
here=$(cd "$(dirname "$0")/.." && pwd)
dali=$(compgen -G "$wheels/nvidia_dali_cuda120-2.4.0-*x86_64*.whl" | head -1) || true
if [ -z "$dali" ]; then
  echo "error: WHEELS: no nvidia_dali_cuda120-2.4.0 x86_64 wheel in $wheels" >&2; exit 2
fi
locked() {  # WHEEL: does trainer/requirements.lock list its SHA-256 under its name==version?
  local base name version got
  base=$(basename "$1")
  name=$(echo "${base%%-*}" | tr '_A-Z' '-a-z')
  version=$(echo "$base" | cut -d- -f2)
  got=$(sha256sum "$1" | cut -d' ' -f1)
  # the lock lists one hash per file of the pin on PyPI, each on a "--hash=sha256:" line below it
  if ! awk -v pin="$name==$version" '$1 == pin {on = 1; next} on && !/--hash=/ {on = 0} on' \
      "$here/trainer/requirements.lock" | grep -q "sha256:$got"; then
    echo "error: WHEELS: $1 hashes to $got, which trainer/requirements.lock does not list for $name==$version" >&2
    return 1
  fi
}
tree=$(mktemp -d)
trap 'rm -rf "$tree" "$tree".*' EXIT
for w in "$wheels"/*.whl; do
  case "$w" in "$wheels"/nvidia_dali_cuda120-*) [ "$w" = "$dali" ] || continue;; esac  # one platform's DALI
  locked "$w" || exit 2
  unzip -q -o "$w" -d "$tree"
done
rm -rf "$tree/nvidia/dali/include"
find "$tree" -name '*.cpython-3*-x86_64-linux-gnu.so' ! -name '*.cpython-312-*' -delete
mkdir -p "$out"
(cd "$tree" && tar -cf - --sort=name --owner=0 --group=0 --numeric-owner . | xz -9 -T0 >"$tree.tar.xz")
rm -f "$out"/[0-9]*/pack-[0-9]*
split -b "${part_mib}M" -d -a 2 "$tree.tar.xz" "$tree.part-"
n=0
for p in "$tree".part-*; do
  mkdir -p "$out/$n" && mv "$p" "$out/$n/pack-$(printf %02d $n)"
  n=$((n + 1))
done
echo "$(du -b "$tree.tar.xz" | cut -f1) bytes in $n parts: $out/0 to $out/$((n - 1))"
