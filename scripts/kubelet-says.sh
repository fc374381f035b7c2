#!/bin/sh
# Prints whether kubelet runs ("kubelet active", "kubelet failed", ...) and the last error line
# the kubelet itself logged (_SYSTEMD_UNIT: not systemd's own lines about the unit, such as
# "Failed with result"): the last one matching pods (an extended regexp of pod="ns/name" of the
# pods a wait is about; "" for none) when there is one.
: "${pods?}"
echo "kubelet $(systemctl is-active kubelet 2>/dev/null)"
errors=$(journalctl _SYSTEMD_UNIT=kubelet.service -n 2000 --no-pager -o cat 2>/dev/null | grep -E '^E[0-9]{4} |[Ee]rror|[Ff]ailed')
line=
[ -z "$pods" ] || line=$(printf '%s\n' "$errors" | grep -E "$pods" | tail -n 1)
[ -n "$line" ] || line=$(printf '%s\n' "$errors" | tail -n 1)
printf '%s\n' "$line" | cut -c1-400
