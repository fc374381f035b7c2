#!/bin/sh
# Stops, disables and removes one of kforge's systemd units and its files (one path a line);
# nothing when its unit file is not there.
# Prints "removed" when it removed the unit.
: "${unit:?}" "${unit_path:?}" "${files?}"
[ -f "$unit_path" ] || exit 0
systemctl disable -q --now "$unit" || exit 1
set -- "$unit_path"
while IFS= read -r f; do [ -z "$f" ] || set -- "$@" "$f"; done <<LIST
$files
LIST
rm -f "$@" && systemctl daemon-reload && echo removed
