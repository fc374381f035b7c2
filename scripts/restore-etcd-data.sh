#!/bin/sh
# restore: unpacks the restored member directory (a gzip-compressed tar on stdin) beside etcd's
# data directory, then swaps it in: the old member directory goes only once the new one is
# complete. The member directory belongs to owner (user:group, the etcd user), or to root when
# owner is empty.
: "${dir:?}"
: "${owner?}"
set -e
d=$dir
rm -rf "$d.kforge-restore"
# Only the directories themselves are made here (/var/lib exists): -m applies to both.
# shellcheck disable=SC2174
mkdir -p -m 0700 "$d.kforge-restore" "$d"
tar -xzf - -C "$d.kforge-restore"
rm -rf "$d/member"
mv "$d.kforge-restore/member" "$d/member"
rmdir "$d.kforge-restore"
chmod 0700 "$d"
[ -z "$owner" ] || chown -R "$owner" "$d"
sync
