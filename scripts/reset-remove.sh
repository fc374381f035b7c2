#!/bin/sh
# reset: removes each of paths (one a line), then empty_dir if it is empty, and the facts' cache
# (facts_cache) without a word: every connect writes it, reset's own included. A directory that
# is a mount point, or a symlink to a directory (the user's layout: /var/lib/kubelet on another
# disk, say), is emptied and kept, as kubeadm's CleanDir does. It refuses while mounts remain
# below the kubelet's directory.
# Prints "changed WHAT" for each thing it changed.
: "${kubelet_dir:?}" "${paths:?}" "${empty_dir:?}" "${facts_cache:?}"
kd=$kubelet_dir
k=$(readlink -f "$kd" 2>/dev/null); [ -n "$k" ] || k=$kd
if awk -v kd="$kd/" -v k="$k/" 'index($2, kd) == 1 || index($2, k) == 1 {f=1} END {exit !f}' /proc/mounts; then
  echo "mounts remain under $kd: run kforge reset again, or unmount them" >&2; exit 1
fi
while IFS= read -r p; do
  [ -n "$p" ] || continue
  if [ -d "$p" ] && { [ -L "$p" ] || mountpoint -q "$p" 2>/dev/null; }; then
    [ -z "$(ls -A "$p/")" ] && continue
    find "$p/" -mindepth 1 -maxdepth 1 -exec rm -rf --one-file-system -- {} + || exit 1
    echo "changed emptied $p"
  elif [ -e "$p" ] || [ -L "$p" ]; then
    rm -rf --one-file-system -- "$p" || exit 1
    echo "changed removed $p"
  fi
done <<LIST
$paths
LIST
d=$empty_dir; [ -d "$d" ] && rmdir "$d" 2>/dev/null && echo "changed removed $d"
rm -rf -- "$facts_cache"; true
