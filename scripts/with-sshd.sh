#!/bin/sh
# Runs COMMAND with a private sshd on 127.0.0.1 (`make cluster-test`): Debian
# 12's openssh-server (installed through scripts/deps.sh when missing,
# without starting its system service) on a free loopback port, with its own
# configuration, a throwaway host key and a throwaway user key, all under one
# temporary directory. It lets in one dedicated user, made here (its home in
# that directory, login by key only, no password), and nobody else. The ssh
# client reaches it through the host alias RUMOR_SSHD_HOST of an ssh_config
# of its own: RUMOR_SSHD_PATH holds an `ssh` that is /usr/bin/ssh with that
# file (-F), the port, the key and a known_hosts with the host key (strict
# checking), for programs that run plain `ssh HOST` such as `rumor launch
# --hosts`. Nothing of the machine's own ssh configuration is read or
# changed. On exit sshd and the user's processes are stopped, the user
# deleted and the directory removed.
#
# usage: with-sshd.sh COMMAND...
# Exported to COMMAND: RUMOR_SSHD_HOST (the alias), RUMOR_SSHD_PATH (a
# directory for the front of PATH), RUMOR_SSHD_USER, RUMOR_SSHD_HOME (the
# user's home, writable by it).
# Exit status: COMMAND's; 3 when no sshd can be had (not root, the packages
# cannot be installed, sshd does not start or lets no one in; the reason
# printed in one line).
set -eu
[ $# -gt 0 ] || { echo "usage: with-sshd.sh COMMAND..." >&2; exit 2; }
cannot() {
    echo "[sshd] no sshd: $*"
    exit 3
}
here=$(dirname "$0")

[ "$(id -u)" -eq 0 ] || cannot "starting sshd and adding its test user needs root"
if [ ! -x /usr/sbin/sshd ] || ! command -v ssh-keygen >/dev/null 2>&1; then
    # a policy-rc.d that refuses keeps the package's own sshd stopped
    policy=/usr/sbin/policy-rc.d
    made_policy=no
    if [ ! -e $policy ]; then
        printf '#!/bin/sh\nexit 101\n' >$policy && chmod 755 $policy && made_policy=yes
    fi
    status=0
    sh "$here/deps.sh" openssh-server openssh-client || status=$?
    [ $made_policy = no ] || rm -f $policy
    [ $status -eq 0 ] || cannot "apt-get could not install openssh-server openssh-client"
fi
ssh=$(command -v ssh) || cannot "no ssh client on PATH"

dir=$(mktemp -d /tmp/rumor-sshd-XXXXXX)
chmod 755 "$dir" # the user's home is inside
user=rumor-ssh-$$
alias=rumor-sshd
pid=""
made_user=no
made_privsep=no
start=$(date +%s)
stop() {
    status=$?
    trap - EXIT INT TERM
    if [ -n "$pid" ]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    if [ $made_user = yes ]; then
        # what the user still runs was started through this sshd
        for p in $(pgrep -u "$user" || true); do kill "$p" 2>/dev/null || true; done
        deadline=$(($(date +%s) + 15))
        while pgrep -u "$user" >/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do
            sleep 0.2
        done
        for p in $(pgrep -u "$user" || true); do kill -KILL "$p" 2>/dev/null || true; done
        userdel "$user" 2>/dev/null || echo "[sshd] could not delete user $user"
    fi
    [ $made_privsep = no ] || rmdir /run/sshd 2>/dev/null || true
    rm -rf "$dir"
    echo "[sshd] stopped"
    exit "$status"
}
trap stop EXIT
trap 'exit 130' INT TERM

useradd --no-create-home --home-dir "$dir/home" --shell /bin/sh \
    --gid nogroup --password '*' "$user" || cannot "useradd $user failed"
made_user=yes
mkdir -p "$dir/home/.ssh" "$dir/client" "$dir/bin"
ssh-keygen -q -t ed25519 -N '' -C "rumor test host" -f "$dir/host_key"
ssh-keygen -q -t ed25519 -N '' -C "rumor test user" -f "$dir/client/id"
cp "$dir/client/id.pub" "$dir/home/.ssh/authorized_keys"
chown -R "$user" "$dir/home"
chmod 755 "$dir/home"
chmod 700 "$dir/home/.ssh"
echo "$alias $(cat "$dir/host_key.pub")" >"$dir/known_hosts"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$dir/sshd_config" <<EOF
ListenAddress 127.0.0.1:$port
HostKey $dir/host_key
PidFile $dir/sshd.pid
AuthorizedKeysFile .ssh/authorized_keys
AllowUsers $user
PermitRootLogin no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes yes
AllowTcpForwarding no
X11Forwarding no
PrintMotd no
EOF
cat >"$dir/ssh_config" <<EOF
Host $alias
    HostName 127.0.0.1
    Port $port
    User $user
    IdentityFile $dir/client/id
    IdentitiesOnly yes
    HostKeyAlias $alias
    UserKnownHostsFile $dir/known_hosts
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking yes
    BatchMode yes
EOF
printf '#!/bin/sh\nexec %s -F %s "$@"\n' "$ssh" "$dir/ssh_config" >"$dir/bin/ssh"
chmod 755 "$dir/bin/ssh"

# sshd's privilege separation needs this directory (Debian's service makes it)
if [ ! -d /run/sshd ]; then
    mkdir -m 755 /run/sshd
    made_privsep=yes
fi
why=$(/usr/sbin/sshd -t -f "$dir/sshd_config" 2>&1) || cannot "sshd refuses its configuration: $why"
/usr/sbin/sshd -D -e -f "$dir/sshd_config" >"$dir/sshd.log" 2>&1 &
pid=$!
until out=$("$dir/bin/ssh" "$alias" id -un 2>&1) && [ "$out" = "$user" ]; do
    kill -0 "$pid" 2>/dev/null || cannot "sshd did not start: $(tail -n 1 "$dir/sshd.log")"
    [ $(($(date +%s) - start)) -lt 30 ] ||
        cannot "no key login within 30 s: $(echo "$out" | tail -n 1) / $(tail -n 1 "$dir/sshd.log")"
    sleep 0.2
done
export RUMOR_SSHD_HOST="$alias" RUMOR_SSHD_PATH="$dir/bin" RUMOR_SSHD_USER="$user" \
    RUMOR_SSHD_HOME="$dir/home"
echo "[sshd] $(/usr/sbin/sshd -V 2>&1 | head -n 1 || true) on 127.0.0.1:$port, user $user, ready in $(($(date +%s) - start)) s"
"$@"
