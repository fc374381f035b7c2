#!/bin/sh
# An OS hostname other than the inventory's name ($1: with capitals and a domain).
set -eu
printf '%s\n' "$1" >/etc/hostname
hostname "$1"
[ "$(uname -n)" = "$1" ]
