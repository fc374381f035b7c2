#!/bin/sh
# facts: the sha256 of each of paths (one a line) that is a regular file: "sum SHA256 PATH".
: "${paths:?}"
set --
while IFS= read -r f; do [ -f "$f" ] && set -- "$@" "$f"; done <<LIST
$paths
LIST
[ $# -gt 0 ] && sha256sum -- "$@" | while read -r s p; do printf 'sum %s %s\n' "$s" "$p"; done
