#!/bin/sh
# apply and restore, on a master: the system user etcd runs as, made where it is missing (as
# distributions' etcd packages make theirs: a system user and group, no login, the data
# directory as home), and the data directory given to it, 0700, as the CIS Kubernetes Benchmark
# asks (1.1.11, 1.1.12). A data directory of an etcd that ran as root is handed over whole.
# Prints the user's passwd line.
: "${user:?}"
: "${dir:?}"
set -e
getent group "$user" >/dev/null || groupadd --system "$user"
getent passwd "$user" >/dev/null || useradd --system --gid "$user" --home-dir "$dir" --no-create-home --shell /usr/sbin/nologin --comment "etcd, made by kforge" "$user"
[ -d "$dir" ] || install -d -m 0700 -o "$user" -g "$user" "$dir"
[ "$(stat -c %U:%G "$dir")" = "$user:$user" ] || chown -R "$user:$user" "$dir"
chmod 0700 "$dir"
getent passwd "$user"
