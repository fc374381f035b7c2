#!/bin/sh
# etcd status and etcd snapshot --fetch, on a master: what its scheduled snapshots are. Prints
# the host's clock (now), whether the timer is active (state) and when it last started (timer,
# Unix seconds; empty when never), the result of the snapshot unit's last run (result; empty
# before the first), then each record in the directory as a "record NAME" line followed by the
# record's JSON on one line.
: "${dir:?}"
: "${timer:?}"
: "${unit:?}"
echo "now $(date +%s)"
echo "state $(systemctl is-active "$timer" 2>/dev/null)"
echo "timer $(systemctl show --timestamp=unix -p ActiveEnterTimestamp --value "$timer" 2>/dev/null | tr -d @)"
echo "result $(systemctl show -p Result --value "$unit" 2>/dev/null)"
for f in "$dir"/etcd-*.json; do
	[ -f "$f" ] || continue
	name=${f##*/}
	echo "record ${name%.json}"
	tr -d '\n' <"$f"
	echo
done
