#!/bin/sh
# apply: points a joined worker's kubelet kubeconfig (written by its kubelet at TLS bootstrap,
# with the bootstrap kubeconfig's server) at $server when it names another API server, as after
# a restore onto new masters or a changed controlPlaneEndpoint, and restarts kubelet. The client
# certificate stays: it is the kubelet's own, signed by the same CA.
# Prints the server it named before when it changed it; nothing when it was right or absent.
: "${server:?}" "${kubeconfig:?}"
f=$kubeconfig
[ -f "$f" ] || exit 0
cur=$(sed -n 's/^ *server: *//p' "$f" | head -n 1)
[ "$cur" = "$server" ] && exit 0
sed "s#^\\( *server:\\).*#\\1 $server#" "$f" > "$f.kforge-tmp" && chmod 600 "$f.kforge-tmp" && mv "$f.kforge-tmp" "$f" || exit 1
systemctl is-active -q kubelet && { systemctl restart kubelet || exit 1; }
echo "$cur"
