#!/bin/sh
# A host whose kernel has no legacy iptables, as RHEL 10's: the ip_tables, ip6_tables and
# arp_tables modules and the tables built on them are unloaded (Debian's kernel loads ip_tables at
# boot, unused) and deleted (the module index rebuilt), and so are the iptables-legacy commands.
# iptables-nft and nft stay. Fails when a legacy table is in use and cannot be unloaded.
set -eu
m=/lib/modules/$(uname -r)
find "$m" \( -name 'ip_tables.ko*' -o -name 'ip6_tables.ko*' -o -name 'arp_tables.ko*' \
  -o -name 'iptable_*.ko*' -o -name 'ip6table_*.ko*' -o -name 'arptable_*.ko*' \) -delete
depmod
for mod in iptable_filter iptable_nat iptable_mangle iptable_raw iptable_security ip6table_filter \
  ip6table_nat ip6table_mangle ip6table_raw ip6table_security arptable_filter ip_tables ip6_tables arp_tables; do
  if grep -q "^$mod " /proc/modules; then rmmod "$mod"; fi
done
rm -f /usr/sbin/xtables-legacy-multi /usr/sbin/iptables-legacy /usr/sbin/iptables-legacy-save \
  /usr/sbin/iptables-legacy-restore /usr/sbin/ip6tables-legacy /usr/sbin/ip6tables-legacy-save \
  /usr/sbin/ip6tables-legacy-restore
if modprobe -n -q ip_tables; then echo "ip_tables is still loadable" >&2; exit 1; fi
if [ -e /proc/net/ip_tables_names ]; then echo "ip_tables is still in the running kernel" >&2; exit 1; fi
