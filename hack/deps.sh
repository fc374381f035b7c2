#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks for kforge's tests: the Debian packages listed in
# hack/apt-packages.txt (only the missing ones; a no-op when all are present) and a Go toolchain
# check. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

want=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' hack/apt-packages.txt)
missing=()
for p in $want; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "deps: missing Debian packages: ${missing[*]}; run as root or: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
  echo "deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v go >/dev/null; then
  for d in /usr/local/go/bin /usr/lib/go/bin; do [ -x "$d/go" ] && { echo "deps: go is at $d/go; add it to PATH" >&2; exit 1; }; done
  echo "deps: Go 1.26 is required (https://go.dev/dl/)" >&2
  exit 1
fi
