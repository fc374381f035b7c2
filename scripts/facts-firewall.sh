#!/bin/sh
# facts: the host's firewall, when one runs: "firewall=firewalld", its default zone ("fwzone
# NAME") and every port it lets in, given as a port or through a service ("fwopen 6443/tcp",
# "fwopen 2379-2380/tcp"), and the sources of its trusted zone ("fwsource 10.244.0.0/16");
# "firewall=ufw" and ufw's status lines ("ufw LINE"); or "firewall=none".
if command -v firewall-cmd >/dev/null 2>&1 && firewall-cmd --state >/dev/null 2>&1; then
	echo firewall=firewalld
	printf 'fwzone %s\n' "$(firewall-cmd --get-default-zone 2>/dev/null)"
	for p in $(firewall-cmd --list-ports 2>/dev/null); do printf 'fwopen %s\n' "$p"; done
	for s in $(firewall-cmd --list-services 2>/dev/null); do
		for p in $(firewall-cmd --permanent --service="$s" --get-ports 2>/dev/null); do printf 'fwopen %s\n' "$p"; done
	done
	for s in $(firewall-cmd --zone=trusted --list-sources 2>/dev/null); do printf 'fwsource %s\n' "$s"; done
elif command -v ufw >/dev/null 2>&1 && ufw status 2>/dev/null | grep -q '^Status: active'; then
	echo firewall=ufw
	ufw status 2>/dev/null | while IFS= read -r l; do printf 'ufw %s\n' "$l"; done
else
	echo firewall=none
fi
