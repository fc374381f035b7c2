#!/bin/sh
# facts: what the host knows of the control plane's virtual IP vip: "viphere=1" when one of its
# interfaces has it; else the interface whose subnet holds it ("vipdev=") and, after an ARP
# request for it (the kernel's, for a TCP connection attempt to the API server's port), the MAC
# address that answered, as the neighbour table says ("vipmac=").
: "${vip:?}"
v=$vip
if ip -o -4 addr show 2>/dev/null | grep -q " inet $v/"; then echo viphere=1
else
  r=$(ip -o -4 route get "$v" 2>/dev/null)
  case "$r" in *" via "*|"") ;; *) d=${r#* dev }; echo "vipdev=${d%% *}";; esac
  # shellcheck disable=SC2016 # $1 is bash's
  command -v bash >/dev/null 2>&1 && timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/6443"' sh "$v" >/dev/null 2>&1
  n=$(ip neigh show "$v" 2>/dev/null)
  case "$n" in *lladdr*REACHABLE*) m=${n#*lladdr }; echo "vipmac=${m%% *}";; esac
fi
