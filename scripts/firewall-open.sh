#!/bin/sh
# firewall: makes the host's firewall of kind let in what a node needs, for good: ports (one a
# line, "6443/tcp" or "30000-32767/udp") and everything from sources (one subnet a line: the
# pods' and the Services'). firewalld: the ports in zone, the sources in the trusted zone, both
# permanent, then a reload (which keeps the rules of kube-proxy and flannel: they are not
# firewalld's). ufw: allow rules for the ports and sources, and route rules to and from the
# sources (forwarded pod traffic). Prints "opened PORT" and "trusted SOURCE" for each.
: "${kind:?}" "${zone?}" "${ports?}" "${sources?}"
case "$kind" in
firewalld)
	: "${zone:?}"
	printf '%s\n' "$ports" | while IFS= read -r p; do
		[ -n "$p" ] || continue
		firewall-cmd --permanent --zone="$zone" --add-port="$p" >/dev/null || exit 1
		echo "opened $p"
	done || exit 1
	printf '%s\n' "$sources" | while IFS= read -r s; do
		[ -n "$s" ] || continue
		firewall-cmd --permanent --zone=trusted --add-source="$s" >/dev/null || exit 1
		echo "trusted $s"
	done || exit 1
	firewall-cmd --reload >/dev/null
	;;
ufw)
	printf '%s\n' "$ports" | while IFS= read -r p; do
		[ -n "$p" ] || continue
		ufw allow "$(printf '%s' "$p" | tr - :)" >/dev/null || exit 1
		echo "opened $p"
	done || exit 1
	printf '%s\n' "$sources" | while IFS= read -r s; do
		[ -n "$s" ] || continue
		{ ufw allow from "$s" && ufw route allow from "$s" && ufw route allow to "$s"; } >/dev/null || exit 1
		echo "trusted $s"
	done || exit 1
	;;
*)
	echo "no firewall kforge knows: $kind" >&2
	exit 1
	;;
esac
