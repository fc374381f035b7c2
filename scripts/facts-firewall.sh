#!/bin/sh
# facts: the host's firewall, when one runs: "firewall=firewalld", its default zone ("fwzone
# NAME") and every port it lets in, given as a port or through a service ("fwopen 6443/tcp",
# "fwopen 2379-2380/tcp"), and the sources of its trusted zone ("fwsource 10.244.0.0/16");
# "firewall=ufw" and ufw's status lines ("ufw LINE"); or "firewall=none".
if command -v firewall-cmd >/dev/null 2>&1 && firewall-cmd --state >/dev/null 2>&1; then
	echo firewall=firewalld
	z=$(firewall-cmd --get-default-zone 2>/dev/null)
	printf 'fwzone %s\n' "$z"
	# The zone is named: without it, firewalld 1.x adds a warning to the list on stdout when an
	# interface or source is in another zone ("You're performing an operation over default zone").
	for p in $(firewall-cmd --zone="$z" --list-ports 2>/dev/null); do printf 'fwopen %s\n' "$p"; done
	for s in $(firewall-cmd --zone="$z" --list-services 2>/dev/null); do
		for p in $(firewall-cmd --permanent --service="$s" --get-ports 2>/dev/null); do printf 'fwopen %s\n' "$p"; done
	done
	for s in $(firewall-cmd --zone=trusted --list-sources 2>/dev/null); do printf 'fwsource %s\n' "$s"; done
elif command -v ufw >/dev/null 2>&1 && ufw status 2>/dev/null | grep -q '^Status: active'; then
	echo firewall=ufw
	ufw status 2>/dev/null | while IFS= read -r l; do printf 'ufw %s\n' "$l"; done
else
	echo firewall=none
fi
