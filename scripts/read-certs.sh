#!/bin/sh
# Prints the certificates of files, one "KIND PATH" a line: KIND "cert" for a PEM file, whose
# certificate blocks it prints, "kubeconfig" for a kubeconfig, whose client-certificate-data it
# prints decoded. Each file's certificates follow a "==> PATH" line; a missing file prints only
# that line. Only certificates leave the host, never a key.
: "${files?}"
while IFS=' ' read -r kind p; do
  [ -n "$p" ] || continue
  echo "==> $p"
  if [ "$kind" = kubeconfig ]; then
    sed -n 's/^ *client-certificate-data: *//p' "$p" 2>/dev/null | base64 -d 2>/dev/null
  else
    sed -n '/-BEGIN CERTIFICATE-/,/-END CERTIFICATE-/p' "$p" 2>/dev/null
  fi
done <<LIST
$files
LIST
true
