#!/bin/sh
# bundle: a node takes files and images from the masters' registries (mirrors: https://ip:port,
# blank-separated, in the order the node tries them), trusting the CA in ca. Each of files (one
# "SHA256 MODE PATH" a line) is downloaded from repo beside its path, checked against its
# sha256, given its mode and moved into place; each of images (one name a line) is pulled by
# containerd through its hosts.toml files (hosts_dir) and labelled pin_label. What one master
# cannot give is asked of the next; what none gives is left for the upload that follows.
# Prints "file PATH" and "image NAME" for what it took, and "no-curl" when files were asked of a
# node without curl.
: "${mirrors?}" "${ca?}" "${repo:?}" "${files?}" "${images?}" "${hosts_dir:?}" "${pin_label:?}"
if [ -n "$files" ]; then
  if command -v curl >/dev/null; then
    fetch() {
      tmp="$3.kforge-fetch"
      mkdir -p "$(dirname "$3")" || return 0
      for m in $mirrors; do
        if curl -fsS --cacert "$ca" --connect-timeout 5 -o "$tmp" "$m/v2/$repo/blobs/sha256:$1" 2>/dev/null &&
          printf '%s  %s\n' "$1" "$tmp" | sha256sum -c --status 2>/dev/null; then
          chmod "$2" "$tmp" && sync "$tmp" && mv -f "$tmp" "$3" && echo "file $3"
          return 0
        fi
      done
      rm -f "$tmp"
    }
    while read -r sum mode p <&3; do
      [ -z "$sum" ] || fetch "$sum" "$mode" "$p"
    done 3<<LIST
$files
LIST
  else echo no-curl; fi
fi
while IFS= read -r im <&3; do
  [ -z "$im" ] || { ctr -n k8s.io images pull --hosts-dir "$hosts_dir" "$im" >/dev/null 2>&1 && ctr -n k8s.io images label "$im" "$pin_label" >/dev/null && echo "image $im"; }
done 3<<LIST
$images
LIST
true
