#!/bin/sh
# Clears etcd off a host it moved away from, once its member was removed from the cluster and
# its static pod stopped: the member's data (the contents of the data directory, which stays,
# owned by etcd's user) and the member's own certificates (one path a line). Prints "changed
# removed PATH" for each thing it removed.
: "${data_dir:?}" "${files?}"
if [ -d "$data_dir" ]; then
  for p in "$data_dir"/* "$data_dir"/.[!.]*; do
    [ -e "$p" ] || [ -L "$p" ] || continue
    rm -rf --one-file-system -- "$p" || exit 1
    echo "changed removed $p"
  done
fi
while IFS= read -r f; do
  if [ -n "$f" ] && [ -e "$f" ]; then
    rm -f -- "$f" || exit 1
    echo "changed removed $f"
  fi
done <<LIST
$files
LIST
