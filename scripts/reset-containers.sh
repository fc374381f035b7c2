#!/bin/sh
# reset: kills every task in containerd's k8s.io namespace at once, then deletes each task and
# container (with its snapshot), then, with containerd 2, the pod sandboxes it keeps apart from
# containers, and stops any shim of the namespace still running. Images stay. A host without
# containerd running (apply stopped before starting it) has nothing to remove, unless shims of
# the namespace still run. ctr talks to $CONTAINERD_ADDRESS when the caller exports it.
# Prints "changed WHAT" for each thing it changed and "note WHAT" for what it found instead.
command -v ctr >/dev/null 2>&1 || { echo "note ctr not installed"; exit 0; }
k8s_shims() {
  self=$(readlink /proc/self/ns/pid)
  for p in $(pgrep -x containerd-shim 2>/dev/null); do
    [ "$(readlink "/proc/$p/ns/pid")" = "$self" ] && tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- '-namespace k8s.io' && echo "$p"
  done
}
if ! ctr --connect-timeout 5s version >/dev/null 2>&1; then
  if [ -n "$(k8s_shims)" ]; then
    echo "containerd is not answering but containerd-shim processes run (pods may still run): start containerd (systemctl start containerd), then run kforge reset again" >&2; exit 1
  fi
  echo "note containerd not running"; exit 0
fi
ids=$(ctr -n k8s.io containers ls -q) || exit 1
for id in $ids; do ctr -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1 & done; wait
n=0
for id in $ids; do
  ctr -n k8s.io tasks rm -f "$id" >/dev/null 2>&1
  ctr -n k8s.io containers rm "$id" >/dev/null || exit 1
  n=$((n+1))
done
[ "$n" = 0 ] || echo "changed $n containers removed"
if ctr sandboxes --help >/dev/null 2>&1; then
  s=0
  for id in $(ctr -n k8s.io sandboxes ls 2>/dev/null | awk 'NR > 1 {print $1}'); do
    ctr -n k8s.io sandboxes rm -f "$id" >/dev/null 2>&1 && s=$((s+1))
  done
  [ "$s" = 0 ] || echo "changed $s sandboxes removed"
fi
k=0
for p in $(k8s_shims); do kill -9 "$p" 2>/dev/null && k=$((k+1)); done
[ "$k" = 0 ] || echo "changed $k shims stopped"
