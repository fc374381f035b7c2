#!/bin/sh
# A non-root SSH login ($1) with root's authorized key, whose sudo asks no password and has
# RHEL's secure_path: /usr/local/bin and /usr/local/sbin are not on the PATH sudo gives.
set -eu
user=$1
id "$user" >/dev/null 2>&1 || useradd -m -s /bin/sh "$user"
home=$(getent passwd "$user" | cut -d: -f6)
mkdir -p "$home/.ssh"
cp /root/.ssh/authorized_keys "$home/.ssh/authorized_keys"
chown -R "$user:" "$home/.ssh"
chmod 700 "$home/.ssh"
chmod 600 "$home/.ssh/authorized_keys"
printf 'Defaults secure_path = /sbin:/bin:/usr/sbin:/usr/bin\n%s ALL=(ALL) NOPASSWD: ALL\n' "$user" >/etc/sudoers.d/kforge-lab
chmod 440 /etc/sudoers.d/kforge-lab
# shellcheck disable=SC2016 # $PATH is sudo's, expanded by the inner sh
[ "$(su -s /bin/sh -c 'sudo -n sh -c "echo \$PATH"' "$user")" = /sbin:/bin:/usr/sbin:/usr/bin ]
