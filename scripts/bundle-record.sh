#!/bin/sh
# bundle: records in record the files just installed (files: one "SHA256 PATH" a line, each
# landed atomically with its sha256 checked) with what stat_format says of them, replacing their
# earlier lines: "SHA256 SIZE MTIME INODE PATH". Two runs racing on the record can lose a line:
# that file is hashed again next time, nothing worse.
: "${record:?}" "${files:?}" "${stat_format:?}"
drop=
while read -r _ p; do drop="$drop${drop:+ }$p"; done <<LIST
$files
LIST
mkdir -p -- "$(dirname -- "$record")" && {
  [ -f "$record" ] && awk -v drop="$drop" 'BEGIN {n = split(drop, a, " "); for (i = 1; i <= n; i++) d[a[i]] = 1} !($5 in d)' "$record"
  while read -r sum p; do printf '%s %s %s\n' "$sum" "$(stat -c "$stat_format" -- "$p")" "$p"; done <<LIST
$files
LIST
} > "$record.tmp" && mv -f -- "$record.tmp" "$record"
