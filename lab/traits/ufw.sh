#!/bin/sh
# Ubuntu's firewall: ufw enabled with its defaults (incoming and routed packets denied), SSH let
# in first, as a user does before enabling it over SSH.
set -eu
ufw allow 22/tcp >/dev/null
ufw --force enable >/dev/null
ufw status | grep -q '^Status: active'
