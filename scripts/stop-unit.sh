#!/bin/sh
# Stops and disables one of kforge's systemd units (the service route, which removes the route
# it added; the node-local API proxy; kforge-vip, which releases the virtual IP; the registry)
# before its files go; nothing when its unit file is not there.
# Prints "changed $unit $said".
: "${unit:?}" "${unit_path:?}" "${said:?}"
[ -f "$unit_path" ] || exit 0
systemctl disable -q --now "$unit" || exit 1
echo "changed $unit $said"
