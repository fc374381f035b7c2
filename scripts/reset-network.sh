#!/bin/sh
# reset: deletes the pod network's links, its config (cni_conf) and its state: flannel's
# (flannel_run), and, since pods were killed without a CNI DEL, their IP allocations and cached
# results of CNI network cni_network (below cni_state); then kube-proxy's nftables tables.
# Prints "changed WHAT" for each thing it changed.
: "${cni_conf:?}" "${cni_network:?}" "${cni_state:?}" "${flannel_run:?}"
for l in cni0 flannel.1; do
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
  for f in ip ip6; do nft list table $f kube-proxy >/dev/null 2>&1 && { nft delete table $f kube-proxy || exit 1; echo "changed nft table $f kube-proxy deleted"; }; done
fi; true
