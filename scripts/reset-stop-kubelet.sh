#!/bin/sh
# reset: stops and disables kubelet.service when systemd knows it, including a kubelet waiting
# to be restarted after a crash, then names any kubelet still running in the host's own PID
# namespace (kubelets of nested nodes, kind's say, are not the host's).
# Prints "changed WHAT" for each thing it changed and "note kubelet-pid PID" for such a kubelet.
if [ "$(systemctl show -p LoadState --value kubelet.service 2>/dev/null)" = loaded ]; then
  s=$(systemctl show -p ActiveState --value kubelet.service)
  systemctl stop kubelet.service || exit 1
  case "$s" in inactive|failed) ;; *) echo "changed kubelet stopped" ;; esac
  if systemctl is-enabled -q kubelet.service 2>/dev/null; then systemctl disable -q kubelet.service || exit 1; echo "changed kubelet disabled"; fi
fi
self=$(readlink /proc/self/ns/pid)
for p in $(pgrep -x kubelet 2>/dev/null); do [ "$(readlink "/proc/$p/ns/pid")" = "$self" ] && echo "note kubelet-pid $p"; done; true
