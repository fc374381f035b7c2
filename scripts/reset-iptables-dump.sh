#!/bin/sh
# reset: prints the rules of every iptables variant on the host, each after a
# "#kforge-iptables NAME" line: legacy and nft, IPv4 and IPv6 where present, else whatever plain
# iptables-save is.
found=
for t in iptables-legacy iptables-nft ip6tables-legacy ip6tables-nft; do
  command -v "$t-save" >/dev/null 2>&1 || continue
  found=1; echo "#kforge-iptables $t"; "$t-save" 2>/dev/null
done
if [ -z "$found" ]; then for t in iptables ip6tables; do
  command -v "$t-save" >/dev/null 2>&1 || continue
  echo "#kforge-iptables $t"; "$t-save" 2>/dev/null
done; fi; true
