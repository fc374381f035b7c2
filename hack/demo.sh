#!/usr/bin/env bash
# The README's first command (make demo) runs this after building bin/kforge: kforge's main job
# on a local lab fleet, as far as kforge can do it today. Each step is real; none is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
k=bin/kforge
step() { printf '\n== %s\n' "$*" >&2; }

step "kforge $($k version | head -1)"
step "validate and plan the example inventories"
$k inventory validate examples/*.yaml
$k -i examples/ha.yaml plan

step "bring up a lab of 3 systemd hosts (1 master, 2 workers) reachable over SSH"
up=$($k lab up --name demo --hosts 3)
echo "$up"
inv=$(echo "$up" | sed -n 's/^inventory: *//p')
$k -i "$inv" inventory validate
$k -i "$inv" plan

step "render every file kforge will push to each lab host"
out=$(mktemp -d /tmp/kforge-demo-render.XXXXXX)
$k -i "$inv" render -o "$out"
find "$out" -maxdepth 4 | sort | head -40

cat >&2 <<TXT

The lab is still up: ssh into it as shown by 'bin/kforge lab status --name demo'.
The rendered files are in $out.
Not yet possible: 'kforge apply' (next milestone) turns these hosts into a running cluster.
Take the lab down with: bin/kforge lab down --name demo
TXT
