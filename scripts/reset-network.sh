#!/bin/sh
# reset: deletes the pod network's links (flannel-v6.1 is a dual-stack cluster's IPv6 VXLAN; the
# routes through each go with it), its config (cni_conf) and its state: flannel's (flannel_run),
# and, since pods were killed without a CNI DEL, their IP allocations and cached results of CNI
# network cni_network (below cni_state); then the nftables tables of kube-proxy, flannel
# (EnableNFTables), portmap's nftables backend and the NetworkPolicy agent
# (kube-network-policies, whose pods were killed before they could remove it).
# Prints "changed WHAT" for each thing it changed.
: "${cni_conf:?}" "${cni_network:?}" "${cni_state:?}" "${flannel_run:?}"
for l in cni0 flannel.1 flannel-v6.1; do
  if ip link show dev "$l" >/dev/null 2>&1; then ip link delete dev "$l" || exit 1; echo "changed link $l deleted"; fi
done
r=
for p in "$cni_conf" "$flannel_run" "$cni_state/networks/$cni_network" "$cni_state/results/$cni_network"-* "$cni_state"/results/cni-loopback-*; do
  [ -e "$p" ] || continue
  rm -rf -- "$p" || exit 1
  case "$p" in "$cni_state"/results/*) r=1 ;; *) echo "changed removed $p" ;; esac
done
[ -z "$r" ] || echo "changed removed CNI results"
if command -v nft >/dev/null 2>&1; then
  for t in "ip kube-proxy" "ip6 kube-proxy" "ip flannel-ipv4" "ip6 flannel-ipv6" "ip cni_hostport" "ip6 cni_hostport" "inet kube-network-policies"; do
    # shellcheck disable=SC2086 # "family name", split on purpose
    nft list table $t >/dev/null 2>&1 && { nft delete table $t || exit 1; echo "changed nft table $t deleted"; }
  done
fi; true
