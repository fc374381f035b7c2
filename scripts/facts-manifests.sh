#!/bin/sh
# facts: the static-pod manifests directory: "manifests exists", each entry ("manifest NAME")
# and each line of kforge's marker file there ("marker LINE").
: "${manifests_dir:?}" "${marker:?}"
if [ -d "$manifests_dir" ]; then
  echo 'manifests exists'
  # shellcheck disable=SC2012 # the names as they are, hidden ones included
  ls -A "$manifests_dir" | while IFS= read -r e; do printf 'manifest %s\n' "$e"; done
  [ -f "$marker" ] && while IFS= read -r l || [ -n "$l" ]; do printf 'marker %s\n' "$l"; done <"$marker"
fi
