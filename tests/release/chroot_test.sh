#!/usr/bin/env bash
# The release tarball runs unchanged on older and newer Debian with nothing installed:
# tools/release packages the built binary, and the tarball is unpacked into minimal
# Debian 11 (bullseye, glibc 2.31) and Debian 12 (bookworm) systems made with
# `debootstrap --variant=minbase` (none of the build's libraries inside: checked). In
# each, through chroot: `ringtrain --version`, `prepare` on a small corpus, `bench
# compute` on a tiny shape, and a 2-peer loopback ring trained to the end (both peers
# exit 0 with one param_hash). While a peer runs it must be named `ringtrain` (pgrep -x),
# have re-executed itself through the release's loader (OMP_WAIT_POLICY=PASSIVE in its
# environment), and have mapped no shared library from outside the release (checked on
# peer 0 while it waits for peer 1).
#   tests/release/chroot_test.sh RINGTRAIN_BINARY
# The tarball is cached by content (tests/release/release_tarball.bash: a change to the
# binary, tools/release or a bundled library makes a new one).
# Root only. The chroots are cached in /var/cache/ringtrain-test-chroots (RT_CHROOT_CACHE)
# and made when missing (~96 s each from Debian's archive when the machine is idle).
# RT_CHROOT_SUITES="bullseye bookworm" (the default) names the systems.
# Exit 77 (ctest: skipped) with the reason when not root, without debootstrap, or when the
# archive cannot be reached.
set -euo pipefail
binary=$(readlink -f "${1:?usage: chroot_test.sh RINGTRAIN_BINARY}")
repo=$(cd "$(dirname "$0")/../.." && pwd)
cache=${RT_CHROOT_CACHE:-/var/cache/ringtrain-test-chroots}
mirror=${RT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
skip() { echo "SKIP: $*" && exit 77; }
fail() { echo "FAIL: $*" >&2 && exit 1; }
t0=$(date +%s)
elapsed() { echo "$(($(date +%s) - t0)) s"; }

((EUID == 0)) || skip "needs root (chroot, mount)"
command -v debootstrap >/dev/null || skip "no debootstrap (tools/install-deps --test installs it)"

work=$(mktemp -d /tmp/rt-release-test.XXXXXX)
mounted=() pids=() unpacked=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for m in "${mounted[@]}"; do umount -l "$m" 2>/dev/null || true; done
  for d in "${unpacked[@]}"; do rm -rf "$d"; done
  rm -rf "$work"
}
trap cleanup EXIT

# One run at a time uses (or makes) the cached chroots.
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

make_chroot() { # SUITE: $cache/SUITE, made when missing; returns 77 if the archive is unreachable
  local suite=$1 dir=$cache/$1
  [[ -f $dir/.ringtrain-complete ]] && return 0
  rm -rf "$dir" "$dir.tmp"
  echo "== debootstrap --variant=minbase $suite (not cached yet) ($(elapsed))"
  local start=$(date +%s)
  if ! debootstrap --variant=minbase "$suite" "$dir.tmp" "$mirror" >"$work/debootstrap-$suite.log" 2>&1; then
    tail -5 "$work/debootstrap-$suite.log"
    rm -rf "$dir.tmp"
    if grep -qiE "couldn't download|failed to (download|resolve|connect)|temporary failure|unable to (fetch|connect)|Release file|No such host|Connection (refused|timed out)" \
      "$work/debootstrap-$suite.log"; then
      skip "debootstrap cannot reach the archive ($mirror) for $suite"
    fi
    fail "debootstrap $suite failed (log above)"
  fi
  touch "$dir.tmp/.ringtrain-complete"
  mv "$dir.tmp" "$dir"
  echo "   made $dir in $(($(date +%s) - start)) s"
}

echo "== tools/release --binary $binary ($(elapsed))"
# shellcheck source=tests/release/release_tarball.bash
source "$repo/tests/release/release_tarball.bash"
tarball=$(release_tarball "$binary")
name=$(basename "$tarball" .tar.gz)
echo "   $(du -k "$tarball" | cut -f1) KiB"

# A base port of our own (two peers), away from the C++ tests' 10000-29999.
port=$((30000 + ($$ % 4000) * 2))

run_in() { # ROOT CMD...: as a user would, with nothing of ours in the environment
  local root=$1 && shift
  chroot "$root" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 "$@"
}

check_system() { # SUITE
  local suite=$1 root=$cache/$1
  make_chroot "$suite"
  echo "== $suite: $(run_in "$root" /bin/sh -c '. /etc/os-release; echo "$PRETTY_NAME"'), $(run_in "$root" ldd --version | head -1) ($(elapsed))"
  # Nothing the build links is in the minimal system (the C++ runtime may be: apt uses it).
  for lib in libdnnl.so.2 libcrypto.so.3 libsentencepiece.so.0 libabsl_base.so.20220623 libgomp.so.1 libOpenCL.so.1; do
    [[ -z $(find "$root/usr/lib" "$root/lib" -name "$lib" 2>/dev/null | head -1) ]] ||
      fail "$suite chroot already has $lib: not a minimal system"
  done
  if ! mountpoint -q "$root/proc"; then
    mount -t proc proc "$root/proc"
    mounted+=("$root/proc")
  fi
  local rel=/opt/rt-test-$$
  rm -rf "${root:?}$rel"
  mkdir -p "$root$rel"
  unpacked+=("$root$rel")
  tar -xzf "$tarball" -C "$root$rel"
  local rt=$rel/$name/ringtrain
  # A small corpus: the first 300 KB of the bundled Vietnamese sample.
  { zstd -dc "$repo/third_party/vi-wiki-sample/vi-wiki-sample.txt.zst" || true; } | head -c 300000 >"$root$rel/corpus.txt"

  # The binary alone, under the system's own loader, cannot start there: what the
  # launcher and lib/ add is what makes it run.
  if run_in "$root" "$rel/$name/lib/ringtrain.bin" --version >"$work/bare.out" 2>&1; then
    [[ $suite == bookworm ]] || fail "$suite: lib/ringtrain.bin ran without the release's libraries"
  else
    echo "   without the launcher: $(head -1 "$work/bare.out")"
  fi

  local start=$(date +%s%N)
  run_in "$root" "$rt" --version | tee "$work/version.out"
  echo "   --version took $((($(date +%s%N) - start) / 1000000)) ms"
  grep -q "^ringtrain [^ ]* (commit " "$work/version.out" || fail "$suite: --version has no version line"
  grep -q "^kernels  " "$work/version.out" || fail "$suite: --version names no kernel path"
  grep -q "^bf16     \(native\|emulated\|unavailable\)" "$work/version.out" || fail "$suite: --version: bf16?"

  echo "-- prepare ($(elapsed))"
  run_in "$root" "$rt" prepare --input "$rel/corpus.txt" --out "$rel/data" --vocab-size 512 \
    --val-fraction 0.05 --threads 2 | tail -3
  [[ -f $root$rel/data/manifest.txt ]] || fail "$suite: prepare wrote no manifest"

  echo "-- bench compute ($(elapsed))"
  run_in "$root" "$rt" bench compute --layers 2 --heads 2 --dim 64 --seq-len 32 --batch 2 \
    --vocab 512 --steps 2 --warmup-steps 1 --threads 1 >"$work/bench.out"
  tail -1 "$work/bench.out" | grep -q '"tokens_per_s":' || fail "$suite: bench compute printed no JSON line"
  echo "   $(tail -1 "$work/bench.out" | grep -o '"tokens_per_s":[^,]*')"

  echo "-- a 2-peer ring on loopback ports $port, $((port + 1)) ($(elapsed))"
  printf '127.0.0.1:%d\n127.0.0.1:%d\n' "$port" "$((port + 1))" >"$root$rel/hosts"
  local r
  for r in 0 1; do
    # chroot itself in the background (not a function: $! must be the peer's pid, which
    # env, the launcher and the loader keep by exec).
    chroot "$root" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 \
      "$rt" train --data "$rel/data" --hosts "$rel/hosts" --rank "$r" \
      --layers 2 --heads 2 --dim 64 --seq-len 32 --batch 2 --steps 8 --threads 1 \
      --eval-every 0 --ckpt-dir "$rel/ckpt" --ckpt-shared --metrics "$rel/m.jsonl" --wait 30 \
      >"$work/peer$r.log" 2>&1 &
    pids+=($!)
    ((r == 0)) || continue
    # Peer 0 waits alone for peer 1 (no quorum), so it can be looked at while it runs:
    # once it says so, main() runs after its one re-exec (OMP_WAIT_POLICY) and every
    # library is mapped.
    local pid=$! waited=0
    until grep -q "not training yet" "$work/peer0.log" 2>/dev/null; do
      kill -0 "$pid" 2>/dev/null || { cat "$work/peer0.log"; fail "$suite: peer 0 exited early"; }
      ((waited++ < 600)) || fail "$suite: peer 0 did not start waiting for peer 1 within 60 s"
      sleep 0.1
    done
    tr '\0' '\n' <"/proc/$pid/environ" | grep -qx OMP_WAIT_POLICY=PASSIVE ||
      fail "$suite: peer 0 did not re-execute itself with OMP_WAIT_POLICY=PASSIVE"
    [[ $(cat "/proc/$pid/comm") == ringtrain ]] || fail "$suite: peer 0 is named '$(cat "/proc/$pid/comm")'"
    pgrep -x ringtrain | grep -qx "$pid" || fail "$suite: pgrep -x ringtrain does not find peer 0"
    local mapped outside
    mapped=$(awk '$6 ~ /\.so/ {print $6}' "/proc/$pid/maps" | sort -u)
    (($(wc -l <<<"$mapped") >= 10)) || fail "$suite: peer 0 maps too few libraries to check: $mapped"
    outside=$(grep -v "^$root$rel/$name/lib/" <<<"$mapped" || true)
    [[ -z $outside ]] || fail "$suite: peer 0 mapped libraries from outside the release: $outside"
    echo "   peer 0: pid $pid named ringtrain (pgrep -x finds it), re-executed through the" \
      "release's loader, $(wc -l <<<"$mapped") libraries mapped, all from the release"
  done
  for r in 0 1; do
    if ! wait "${pids[$r]}"; then
      cat "$work/peer$r.log"
      fail "$suite: peer $r failed"
    fi
  done
  pids=()
  local h0 h1
  h0=$(tail -1 "$root$rel/m.rank0.jsonl" | grep -o '"step":[0-9]*,\|"param_hash":"[^"]*"' | tr '\n' ' ')
  h1=$(tail -1 "$root$rel/m.rank1.jsonl" | grep -o '"step":[0-9]*,\|"param_hash":"[^"]*"' | tr '\n' ' ')
  [[ $h0 == *'"step":8,'* && $h0 == "$h1" ]] || fail "$suite: the peers ended at '$h0' and '$h1'"
  echo "   both peers trained to step 8: $h0"
  umount_proc "$root"
  rm -rf "${root:?}$rel"
}

umount_proc() {
  local root=$1 m keep=()
  for m in "${mounted[@]}"; do
    if [[ $m == "$root/proc" ]]; then umount "$m"; else keep+=("$m"); fi
  done
  mounted=("${keep[@]}")
}

suites=${RT_CHROOT_SUITES:-bullseye bookworm}
for suite in $suites; do check_system "$suite"; done
echo "PASS: the release ran on minimal $(echo "$suites" | sed 's/ / and /g') ($(elapsed))"
