#!/bin/sh
# facts: the user commands run as, and the kernel's name for the host, its release and machine.
# Prints "uid=", "hostname=", "arch=" and "kernel=" lines.
# shellcheck disable=SC2046 # uname's three words, split on purpose
set -- $(uname -nrm)
printf 'uid=%s\nhostname=%s\narch=%s\nkernel=%s\n' "$(id -u)" "$1" "$3" "$2"
