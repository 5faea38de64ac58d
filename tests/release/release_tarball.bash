# Sourced by the tests that need a release tarball (release/chroot, fleet/end-to-end): the
# tarball tools/release makes from a built binary, cached by content so that the tests of
# one build share one run of tools/release (~16 s on a busy 2-core machine).
#
#   release_tarball BINARY    # prints the tarball's path (in the cache); its own output
#                             # (tools/release's line, or "cached") goes to stderr
# The key hashes everything tools/release puts in or reads: the binary, tools/release
# itself, the repository files it copies, and the path, size and mtime of every library
# ldd resolves for the binary (an apt upgrade of one makes a new tarball). The cache is
# RT_RELEASE_CACHE (default /var/cache/ringtrain-test-release), one directory per key,
# made under flock and renamed into place when complete; the 3 newest keys are kept.

release_tarball() {
  local binary repo cache key dir lib
  binary=$(readlink -f "${1:?release_tarball BINARY}")
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  cache=${RT_RELEASE_CACHE:-/var/cache/ringtrain-test-release}
  [[ -x $binary ]] || { echo "release_tarball: no executable $binary" >&2 && return 1; }
  key=$(
    {
      sha256sum "$binary" "$repo/tools/release" "$repo/LICENSE" "$repo/hosts.example" \
        "$repo/tools/ringtrain.service" "$repo/tools/ringtrain-keep-running" | cut -d' ' -f1
      ldd "$binary" | grep -o '/[^ ]*' | while read -r lib; do stat -L -c '%n %s %Y' "$lib"; done
    } | sha256sum | cut -c1-16
  ) || return 1
  mkdir -p "$cache" || return 1
  dir=$cache/$key
  (
    flock 8
    if [[ ! -f $dir/.complete ]]; then
      rm -rf "$dir" "$dir.tmp"
      "$repo/tools/release" --binary "$binary" --out "$dir.tmp" >&2 || exit 1
      touch "$dir.tmp/.complete"
      mv "$dir.tmp" "$dir"
      # Keep the 3 newest keys (each ~19 MB).
      find "$cache" -mindepth 1 -maxdepth 1 -type d -printf '%T@ %p\n' | sort -rn | tail -n +4 |
        cut -d' ' -f2- | while read -r old; do rm -rf "$old"; done
    else
      touch "$dir"
      echo "release: cached $(ls "$dir"/ringtrain-*-linux-x86_64.tar.gz)" >&2
    fi
  ) 8>"$cache/.lock" || return 1
  ls "$dir"/ringtrain-*-linux-x86_64.tar.gz
}
