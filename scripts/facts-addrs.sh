#!/bin/sh
# facts: the host's global addresses: "addrs=1" once ip lists them, then "addr IP DEVICE" for
# each. kubelet's --node-ip must be among them, and flannel needs a dual-stack node's IPv4 and
# IPv6 addresses on one device. Then the --node-ip kubelet runs with (kubelet_flags, kforge's
# and kubeadm's flags file), when it has one: "nodeip=IP[,IP]", one per IP family of the cluster.
: "${kubelet_flags:?}"
if command -v ip >/dev/null 2>&1 && out=$(ip -o addr show scope global 2>/dev/null); then
  echo addrs=1
  printf '%s\n' "$out" | while read -r _ dev _ a _; do
    [ -n "$a" ] && printf 'addr %s %s\n' "${a%/*}" "$dev"
  done
fi
[ -f "$kubelet_flags" ] && sed -n 's/.*--node-ip=\([^ "]*\).*/nodeip=\1/p' "$kubelet_flags"
true
