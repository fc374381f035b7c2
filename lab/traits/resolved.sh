#!/bin/sh
# Ubuntu's resolver: systemd-resolved runs with its stub, /etc/resolv.conf names 127.0.0.53 only,
# and the real upstream servers ($1: addresses separated by blanks) are in
# /run/systemd/resolve/resolv.conf. Run again, it changes them.
set -eu
upstream=$1
first=${upstream%% *}
mkdir -p /etc/systemd/resolved.conf.d
printf '[Resolve]\nDNS=%s\nDomains=~.\nLLMNR=no\nMulticastDNS=no\nDNSStubListener=yes\n' "$upstream" >/etc/systemd/resolved.conf.d/kforge-lab.conf
systemctl enable systemd-resolved.service >/dev/null 2>&1
systemctl restart systemd-resolved.service
ln -sf ../run/systemd/resolve/stub-resolv.conf /etc/resolv.conf
i=0
until [ "$(grep -c '^nameserver ' /run/systemd/resolve/resolv.conf 2>/dev/null)" = "$(echo "$upstream" | wc -w)" ] &&
  grep -q "^nameserver $first\$" /run/systemd/resolve/resolv.conf; do
  i=$((i + 1))
  if [ "$i" -gt 50 ]; then echo "systemd-resolved did not write $upstream to /run/systemd/resolve/resolv.conf" >&2; exit 1; fi
  sleep 0.2
done
grep -q '^nameserver 127.0.0.53' /etc/resolv.conf
