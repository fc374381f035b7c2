#!/usr/bin/env bash
# The README's first command runs this: what kforge can really do today, end to end.
set -euo pipefail
cd "$(dirname "$0")/.."
bin/kforge version
for f in examples/*.yaml; do bin/kforge -i "$f" inventory validate; done
bin/kforge -i examples/single-master.yaml plan
