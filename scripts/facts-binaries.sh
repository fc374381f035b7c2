#!/bin/sh
# facts: where each of binaries (names, blank-separated) is on PATH ("bin NAME PATH") and the
# first three lines of its version output ("ver NAME LINE"). The version output is kept in the
# directory cache, one file a binary, keyed by the file's size, times, inode and device, so a
# binary runs only when it changed; a host where cache cannot be made runs them all.
: "${binaries:?}" "${cache:?}"
T=; command -v timeout >/dev/null && T="timeout 5"
set --
for b in $binaries; do
  p=$(command -v "$b") || continue
  printf 'bin %s %s\n' "$b" "$p"
  set -- "$@" "$p"
done
C=$cache
# shellcheck disable=SC2174 # the cache only is made: its parent (/run) is there
[ -d "$C" ] || mkdir -m 0700 -p "$C" 2>/dev/null || C=
[ $# -gt 0 ] || C=
if [ -n "$C" ]; then s=$(stat -L -c '%n %s.%.9Y.%.9Z.%i.%d' -- "$@" 2>/dev/null) || C=; fi
[ -n "$C" ] || s=$(printf '%s -\n' "$@")
[ $# -gt 0 ] && printf '%s\n' "$s" | while read -r p k; do
  b=${p##*/}
  if [ -n "$C" ] && [ -f "$C/$b" ] && { IFS= read -r c; [ "$c" = "$p $k" ]; } <"$C/$b"; then
    { read -r _; while IFS= read -r l; do printf 'ver %s %s\n' "$b" "$l"; done; } <"$C/$b"
    continue
  fi
  case $b in
  kubeadm) a='version -o short';;
  kubectl) a='version --client';;
  socat) a=-V;;
  ip) a=-V;;
  *) a=--version;;
  esac
  # shellcheck disable=SC2086 # $T and $a are words on purpose
  out=$($T "$p" $a 2>&1 </dev/null | head -n 3)
  [ -n "$out" ] && printf '%s\n' "$out" | while IFS= read -r l; do printf 'ver %s %s\n' "$b" "$l"; done
  [ -n "$C" ] && { printf '%s\n' "$p $k"; [ -z "$out" ] || printf '%s\n' "$out"; } >"$C/$b.tmp" && mv -f "$C/$b.tmp" "$C/$b"
done
