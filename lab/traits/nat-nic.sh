#!/bin/sh
# Vagrant's NAT NIC: another interface (nat0, one end of a veth pair whose other end, nat0p,
# has no address: what is sent there goes nowhere) with the address $1, the same on every host,
# and the default route. The lab's NIC keeps the inventory's address. (A dummy link would do,
# but the dummy module may not be loaded, and an nspawn host cannot load it.)
set -eu
ip link show dev nat0 >/dev/null 2>&1 || ip link add nat0 type veth peer name nat0p
for l in nat0 nat0p; do # no IPv6 router solicitations: nothing but what is routed there leaves
  echo 1 >"/proc/sys/net/ipv6/conf/$l/disable_ipv6"
done
ip addr replace "$1/32" dev nat0
ip link set nat0p up
ip link set nat0 up
ip route replace default dev nat0 src "$1"
[ "$(ip -o route get 192.0.2.1 | sed -n 's/.* dev \([^ ]*\).*/\1/p')" = nat0 ]
