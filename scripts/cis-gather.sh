#!/bin/sh
# kforge cis: what the CIS Kubernetes Benchmark's automated checks read on one host, in one
# round trip, as lines the workstation parses (package cis):
#   proc NAME BASE64     the command line (NUL-separated) of each Kubernetes process running;
#   stat MODE USER:GROUP PATH   for every file a check names, and everything under the
#                        directories it names (the PKI, the CNI configuration, kubelet's
#                        drop-ins);
#   conf NAME BASE64     kubelet's and kube-proxy's configuration files, and the API server's
#                        authentication configuration (none holds a secret);
#   encprovider NAME     the providers of the API server's encryption configuration, in order:
#                        their names only, never the file, which holds the keys.
# Inputs: the files (files) and the directories (trees) a host may have, one a line.
: "${files?}"
: "${trees?}"
b64() { base64 -w0 2>/dev/null || base64 | tr -d '\n'; }
st() { [ -e "$1" ] && stat -c 'stat %a %U:%G %n' "$1"; }
arg() { tr '\0' '\n' <"/proc/$1/cmdline" | sed -n "s/^--$2=//p" | head -n 1; }
printf '%s\n' "$files" | while IFS= read -r f; do [ -n "$f" ] && st "$f"; done
printf '%s\n' "$trees" | while IFS= read -r d; do [ -n "$d" ] && [ -d "$d" ] && find "$d" | while IFS= read -r f; do st "$f"; done; done
for p in /proc/[0-9]*; do
  [ -r "$p/cmdline" ] || continue
  n=$(tr '\0' '\n' <"$p/cmdline" | head -n 1)
  n=${n##*/}
  case "$n" in
    kube-apiserver | kube-controller-manager | kube-scheduler | etcd | kubelet | kube-proxy) ;;
    *) continue ;;
  esac
  pid=${p#/proc/}
  printf 'proc %s %s\n' "$n" "$(b64 <"$p/cmdline")"
  case "$n" in
    etcd)
      d=$(arg "$pid" data-dir)
      [ -n "$d" ] && st "$d"
      ;;
    kubelet)
      c=$(arg "$pid" config)
      [ -n "$c" ] && [ -r "$c" ] && { st "$c"; printf 'conf kubelet %s\n' "$(b64 <"$c")"; }
      k=$(arg "$pid" kubeconfig)
      [ -n "$k" ] && st "$k"
      ;;
    kube-proxy)
      c=$(arg "$pid" config)
      [ -n "$c" ] && [ -r "$p/root$c" ] && printf 'conf kube-proxy %s\n' "$(b64 <"$p/root$c")"
      ;;
    kube-apiserver)
      c=$(arg "$pid" authentication-config)
      [ -n "$c" ] && [ -r "$p/root$c" ] && printf 'conf authentication %s\n' "$(b64 <"$p/root$c")"
      c=$(arg "$pid" encryption-provider-config)
      [ -n "$c" ] && [ -r "$p/root$c" ] && sed -n 's/^ *- *\(aescbc\|aesgcm\|secretbox\|identity\|kms\): *.*$/encprovider \1/p' "$p/root$c"
      ;;
  esac
done
exit 0
