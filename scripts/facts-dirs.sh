#!/bin/sh
# facts: which of dirs (one a line) are directories: "dir PATH", in the order asked.
: "${dirs:?}"
while IFS= read -r d; do [ -d "$d" ] && printf 'dir %s\n' "$d"; done <<LIST
$dirs
LIST
