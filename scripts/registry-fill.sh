#!/bin/sh
# bundle: fills a master's registry from the master's own installed binaries and containerd. It
# runs the registry's writable instance (binary serve fill_config, listening on fill_addr only,
# its log in log) while it uploads each of files (one "SHA256 PATH" a line) as a blob of repo
# (the registry checks its sha256) and pushes each of images (one name a line) where the nodes
# look for it (registry.k8s.io/pause:3.10 is fill_addr/registry.k8s.io/pause:3.10), then records key
# in rec. Nothing is done when rec holds key already. With replace=1, a record of other content
# makes it empty the storage (dir/docker) and the record of added fills (added) first.
# Prints $replaced when it emptied the storage, then $filled, or only $up_to_date; fails saying
# why (no curl, the port taken, the registry not starting, a push refused).
: "${key:?}" "${rec:?}" "${replace?}" "${added:?}" "${dir:?}" "${binary:?}" "${fill_config:?}" "${fill_addr:?}" "${log:?}"
: "${repo:?}" "${files?}" "${images?}" "${filled:?}" "${up_to_date:?}" "${replaced:?}"
[ "$(cat "$rec" 2>/dev/null)" != "$key" ] || { echo "$up_to_date"; exit 0; }
command -v curl >/dev/null || { echo "this master has no curl, which fills its registry: install curl (the nodes get the bundle from the workstation meanwhile)" >&2; exit 1; }
r=http://$fill_addr
if curl -fsS -o /dev/null --max-time 2 "$r/v2/" 2>/dev/null; then
  echo "$fill_addr is taken by another process: the registry's writable instance listens there while kforge fills it" >&2; exit 1
fi
if [ -n "$replace" ] && [ -f "$rec" ]; then
  rm -f -- "$rec" "$added" && rm -rf --one-file-system -- "$dir/docker" || exit 1
  echo "$replaced"
fi
mkdir -p "$dir"
"$binary" serve "$fill_config" >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
i=0
until curl -fsS -o /dev/null --max-time 2 "$r/v2/" 2>/dev/null; do
  kill -0 "$pid" 2>/dev/null || { echo "the registry's writable instance exited: $(tail -n 3 "$log")" >&2; exit 1; }
  i=$((i+1)); [ $i -le 150 ] || { echo "the registry's writable instance did not answer on $r within 15 s: $(tail -n 3 "$log")" >&2; exit 1; }
  sleep 0.1
done
blob() {
  curl -fsS -o /dev/null -I "$r/v2/$repo/blobs/sha256:$1" 2>/dev/null && return 0
  loc=$(curl -fsS -X POST -D - -o /dev/null "$r/v2/$repo/blobs/uploads/" | tr -d '\r' | sed -n 's/^[Ll]ocation: *//p') || return 1
  case $loc in /*) loc=$r$loc;; esac
  case $loc in *\?*) loc="$loc&";; *) loc="$loc?";; esac
  curl -fsS -o /dev/null -T "$2" -H 'Content-Type: application/octet-stream' "${loc}digest=sha256:$1" || { echo "upload $2 to the registry: refused (is it the bundle's, sha256 $1?)" >&2; return 1; }
}
while read -r sum p <&3; do
  [ -z "$sum" ] || blob "$sum" "$p" || exit 1
done 3<<LIST
$files
LIST
while IFS= read -r im <&3; do
  [ -z "$im" ] || ctr -n k8s.io images push --plain-http "$fill_addr/$im" "$im" >/dev/null || { echo "push image $im to the registry: failed" >&2; exit 1; }
done 3<<LIST
$images
LIST
printf '%s\n' "$key" > "$rec.tmp" && mv -f "$rec.tmp" "$rec" && echo "$filled"
