#!/usr/bin/env bash
# The README's first command (make demo) runs this after building bin/kforge: kforge's main job,
# for real, on a local lab fleet: 3 systemd hosts reachable over SSH become a Kubernetes cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
k=$PWD/bin/kforge
step() { printf '\n== %s\n' "$*" >&2; }
cache=${KFORGE_CACHE_DIR:-/var/cache/kforge}

step "kforge $($k version | head -1)"
$k inventory validate examples/*.yaml

step "offline bundle: Kubernetes v1.36.3 and its runtime (containerd, runc) built from Go modules (minutes the first time, then cached)"
$k bundle build -o "$cache/demo-bundle"

step "lab: 3 bare systemd hosts (1 master, 2 workers; no container runtime) in network namespaces, reachable over SSH"
up=$($k lab up --name demo --hosts 3 --bare)
echo "$up"
lab_inv=$(echo "$up" | sed -n 's/^inventory: *//p')
inv=$(dirname "$lab_inv")/kforge.yaml
{ cat "$lab_inv"; echo "bundle: $cache/demo-bundle"; } > "$inv"

step "plan, then apply: the cluster in one command"
$k -i "$inv" plan
$k -i "$inv" apply

step "the cluster, seen from this workstation"
kubeconfig=$(mktemp /tmp/kforge-demo-kubeconfig.XXXXXX)
$k -i "$inv" kubeconfig > "$kubeconfig"
"$cache/demo-bundle/bin/kubectl" --kubeconfig "$kubeconfig" get nodes -o wide
"$cache/demo-bundle/bin/kubectl" --kubeconfig "$kubeconfig" get pods -A

step "apply again: nothing to do"
$k -i "$inv" apply 2>&1 | tail -2

cat >&2 <<TXT

The cluster is up. Try:
  $cache/demo-bundle/bin/kubectl --kubeconfig $kubeconfig get pods -A
  $k -i $inv plan
Take it all down with: bin/kforge lab down --name demo
TXT
