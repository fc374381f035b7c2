#!/bin/sh
# bundle: what a host has of the bundle. Prints its machine ("arch=x86_64"); the sha256 of each
# of paths (one a line) that is a file, as sha256sum prints it, or "=SHA256  PATH" from record
# when the file is as kforge installed it (the same stat_format: size, modification time, inode);
# then images_marker and containerd's images in k8s.io (ctr images ls), or no_runtime on a host
# without ctr, or when list_images is empty (no image asked about: containerd may not run yet).
: "${paths?}" "${record:?}" "${stat_format:?}" "${images_marker:?}" "${no_runtime:?}" "${list_images?}"
echo "arch=$(uname -m)"
set --
while IFS= read -r f; do [ -f "$f" ] && set -- "$@" "$f"; done <<LIST
$paths
LIST
# One stat and one awk for all files, then sha256sum for those not as recorded only: forks cost
# a loaded host more than reading the record.
[ $# -gt 0 ] && stat -c "$stat_format %n" -- "$@" | awk -v rec="$record" 'BEGIN {while ((getline l < rec) > 0) {k = l; sub(/^[^ ]+ /, "", k); r[k] = substr(l, 1, index(l, " ") - 1)}} {p = $0; sub(/^[^ ]+ [^ ]+ [^ ]+ /, "", p); if ($0 in r) print "=" r[$0] "  " p; else print "?" p}' |
  while IFS= read -r l; do case $l in =*) printf '%s\n' "$l";; "?"*) sha256sum -- "${l#?}";; esac; done
echo "$images_marker"
[ -n "$list_images" ] || { echo "$no_runtime"; exit 0; }
command -v ctr >/dev/null || { echo "$no_runtime"; exit 0; }
ctr -n k8s.io images ls
