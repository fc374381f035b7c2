#!/bin/sh
# facts: whether the container runtime's socket exists and answers ctr version: "runtime socket
# PATH", "runtime exists", "runtime answering", and the last lines of ctr's output ("ctr LINE").
: "${socket:?}"
T=; command -v timeout >/dev/null && T="timeout 5"
printf 'runtime socket %s\n' "$socket"
if [ -S "$socket" ]; then
  echo 'runtime exists'
  if command -v ctr >/dev/null; then
    if out=$($T ctr --address "$socket" version 2>&1 </dev/null); then echo 'runtime answering'; fi
    printf '%s\n' "$out" | tail -n 12 | while IFS= read -r l; do printf 'ctr %s\n' "$l"; done
  fi
fi
