#!/bin/sh
# reset: unmounts, deepest first, every mount below the kubelet's directory kubelet_dir (pod
# volumes; also below its target when it is a symlink, as kubeadm resolves it) and the pods'
# network namespaces (netns_prefix*), then deletes those namespace files.
# Prints "changed WHAT" for each thing it changed.
: "${kubelet_dir:?}" "${netns_prefix:?}"
kd=$kubelet_dir
n=0
k=$(readlink -f "$kd" 2>/dev/null); [ -n "$k" ] || k=$kd
# /proc/mounts escapes blanks (\040): each word is one whole mount point, decoded by printf %b.
# shellcheck disable=SC2013
for m in $(awk -v kd="$kd/" -v k="$k/" -v ns="$netns_prefix" 'index($2, kd) == 1 || index($2, k) == 1 || index($2, ns) == 1 {print $2}' /proc/mounts | sort -r); do
  m=$(printf '%b' "$m")
  umount -- "$m" 2>/dev/null || umount -l -- "$m" 2>/dev/null || ! awk -v m="$m" '$2 == m {f=1} END {exit !f}' /proc/mounts || { echo "cannot unmount $m" >&2; exit 1; }
  n=$((n+1))
done
[ "$n" = 0 ] || echo "changed $n mounts unmounted"
k=0
for f in "$netns_prefix"*; do [ -e "$f" ] || continue; rm -f -- "$f" || exit 1; k=$((k+1)); done
[ "$k" = 0 ] || echo "changed $k network namespaces removed"
