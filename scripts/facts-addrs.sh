#!/bin/sh
# facts: the host's global addresses: "addrs=1" once ip lists them, then "addr IP DEVICE" for
# each. kubelet's --node-ip must be among them, and flannel needs a dual-stack node's IPv4 and
# IPv6 addresses on one device.
command -v ip >/dev/null 2>&1 || exit 0
out=$(ip -o addr show scope global 2>/dev/null) || exit 0
echo addrs=1
printf '%s\n' "$out" | while read -r _ dev _ a _; do
  [ -n "$a" ] && printf 'addr %s %s\n' "${a%/*}" "$dev"
done
true
