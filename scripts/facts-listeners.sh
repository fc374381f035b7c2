#!/bin/sh
# facts: the listening TCP sockets, as /proc/net/tcp and tcp6 print them ("tcp LINE", "tcp6
# LINE"), and the process holding each ("sock INODE PID COMM"): from ss where it is, else from
# the processes' file descriptors; neither without awk.
for f in /proc/net/tcp /proc/net/tcp6; do [ -r $f ] && grep -E '^ *[0-9]+: [0-9A-Fa-f]+:[0-9A-Fa-f]+ [0-9A-Fa-f]+:[0-9A-Fa-f]+ 0A ' $f | while IFS= read -r l; do printf '%s %s\n' ${f#/proc/net/} "$l"; done; done
if command -v ss >/dev/null && command -v awk >/dev/null; then
  ss -Hltnpe 2>/dev/null | awk '{
    i = ""; p = ""; c = ""
    if (match($0, / ino:[0-9]+/)) i = substr($0, RSTART + 5, RLENGTH - 5)
    if (match($0, /\(\("[^"]*",pid=[0-9]+/)) { u = substr($0, RSTART + 3, RLENGTH - 3); n = index(u, "\""); c = substr(u, 1, n - 1); p = substr(u, n + 6) }
    if (i != "" && i != "0" && p != "") print "sock", i, p, c }'
elif command -v awk >/dev/null; then
  inodes=$(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '$4=="0A"{printf " %s", $10}')
  # shellcheck disable=SC2012 # ls -l of the fd directories: one process for all of them
  [ -n "$inodes" ] && ls -l /proc/[0-9]*/fd 2>/dev/null | awk -v want="$inodes " '
    /^\/proc\/[0-9]+\/fd:$/ { split($0, a, "/"); pid = a[3]; next }
    /socket:\[/ { i = $NF; gsub(/[^0-9]/, "", i); if (index(want, " " i " ")) print i, pid }' |
    while read -r i p; do printf 'sock %s %s %s\n' "$i" "$p" "$(cat "/proc/$p/comm" 2>/dev/null)"; done
fi
