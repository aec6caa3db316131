#!/bin/sh
# The board's half of `make deploy` / `make undeploy` (deploy/deploy.py runs it over ssh as
# root: `sh -s -- COMMAND ... < board.sh`). POSIX sh, so a bare board needs nothing but python3
# and systemd. Every step says what it does; the first failing one stops with a clear line
# and the running version stays (or comes back: see rollback).
#
#   probe                 facts deploy.py needs, as key=value lines
#   install RELEASE       install /opt/fingertip/incoming as releases/RELEASE, switch, restart
#   rollback              back to the previous release (after a failed health check)
#   undeploy              stop and remove everything but the config and the state folder
#
# Layout: /opt/fingertip/{wheels/, deps/<id>/, releases/<id>/ (a venv + share/), current,
# previous, incoming/}; units in /etc/systemd/system, udev rule in /etc/udev/rules.d, the USB
# network link in /etc/systemd/network. /etc/fingertip/fingertip.toml is installed only when
# missing.
set -eu

BASE=/opt/fingertip
INCOMING=$BASE/incoming
CONFIG=/etc/fingertip/fingertip.toml
UNITS="fingertip-gadget.service fingertip.service"
UNIT_DIR=/etc/systemd/system
UDEV_RULE=/etc/udev/rules.d/70-fingertip.rules
UDEV_HELPER=/usr/local/libexec/fingertip-hidg-role
LINK_HELPER=/usr/local/libexec/fingertip-link-reannounce
COMMANDS="fingertip fingertip-gadget" # on PATH, through current: always the running release
NETWORK=/etc/systemd/network/80-fingertip-usb.network
SYSUSERS=/etc/sysusers.d/fingertip.conf

say() { echo "board: $*"; }
fail() {
    echo "board: FAILED: $*" >&2
    exit 1
}

probe() {
    echo "uid=$(id -u)"
    command -v systemctl >/dev/null 2>&1 && echo "systemd=yes" || echo "systemd=no"
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import platform, sysconfig
print("platform=" + sysconfig.get_platform())
print("python=" + platform.python_version())
print("libc=" + " ".join(platform.libc_ver()))'
        # Whether OCR is on decides whether its packages are sent (an unreadable config: unset).
        [ -r $CONFIG ] && python3 -c 'import sys, tomllib
value = tomllib.load(open(sys.argv[1], "rb")).get("ocr", {}).get("enabled")
if value is not None:
    print("ocr=" + (str(value).lower() if isinstance(value, bool) else str(value)))' $CONFIG \
            2>/dev/null || true
    fi
    echo "memtotal_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)"
    [ -e $BASE/current ] && echo "current=$(basename "$(readlink -f $BASE/current)")"
    if [ -d $BASE/wheels ]; then
        for w in $BASE/wheels/*.whl; do [ -e "$w" ] && echo "wheel=$(basename "$w")"; done
    fi
    for mark in $BASE/deps/*/.complete; do
        [ -e "$mark" ] && echo "deps=$(basename "$(dirname "$mark")")"
    done
    return 0
}

ensure_user() {
    put 0644 "$1/fingertip.sysusers" $SYSUSERS
    if command -v systemd-sysusers >/dev/null 2>&1; then
        systemd-sysusers $SYSUSERS
    elif ! id fingertip >/dev/null 2>&1; then
        useradd --system --user-group --home-dir /var/lib/fingertip --no-create-home \
            --shell /usr/sbin/nologin fingertip
    fi
    id fingertip >/dev/null 2>&1 || fail "could not create the fingertip user"
}

# Third-party packages live in deps/<id> (id: the manifest's hash), shared by every release
# built on the same wheels; a release is a small venv with the fingertip wheel and a .pth line
# pointing at its deps. So a deploy that changes only Fingertip installs one wheel (seconds),
# and a second deploy of the same build installs nothing. The deploying machine installs the
# deps into deps-<id>.tar.gz, which is only unpacked here: pip on a small board spent minutes
# unzipping, hashing and byte-compiling them.
pip_run() { # PYTHON pip-args...: the shipped pip wheel, run from the wheel itself
    python=$1
    shift
    "$python" "$BASE/wheels/$(grep '^pip-' "$INCOMING/manifest" | head -n 1)/pip" "$@" \
        --quiet --no-index --disable-pip-version-check --no-cache-dir --root-user-action=ignore
}

make_deps() {
    deps_id=$(sha256sum <"$INCOMING/manifest" | cut -c1-12)
    deps=$BASE/deps/$deps_id
    [ -f "$deps/.complete" ] && return 0
    bundle=$INCOMING/deps-$deps_id.tar.gz
    [ -f "$bundle" ] || fail "the third-party packages for deps/$deps_id were not sent"
    rm -rf "$deps"
    say "unpacking the third-party packages into deps/$deps_id (once per set of wheels)"
    mkdir -p "$deps"
    tar -xzf "$bundle" -C "$deps" || fail "unpacking $bundle failed (disk full?)"
    tag=$(python3 -c 'import sys; print(sys.implementation.cache_tag)')
    if [ "$(cat "$deps/compiled-for")" != "$tag" ]; then
        say "byte-compiling them for $tag (the deploying machine has another Python)"
        python3 -m compileall -q -j 0 --invalidation-mode unchecked-hash "$deps/site-packages" \
            >/dev/null || fail "byte-compiling $deps failed"
    fi
    touch "$deps/.complete"
}

make_release() {
    release=$1 dir=$BASE/releases/$1
    make_deps
    if [ -f "$dir/.complete" ]; then
        say "release $release already installed"
        return 0
    fi
    rm -rf "$dir"
    say "creating release $release"
    python3 -m venv --without-pip "$dir" ||
        fail "python3 -m venv failed (is python3-venv installed?)"
    site=$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$deps/site-packages" >"$site/fingertip-deps.pth"
    pip_run "$dir/bin/python" install --no-deps "$INCOMING"/dist/*.whl ||
        fail "installing the fingertip wheel into $dir failed"
    mkdir -p "$dir/share"
    cp -R "$INCOMING/share/." "$dir/share/"
    cp "$INCOMING/manifest" "$dir/share/manifest"
    echo "$deps_id" >"$dir/share/deps"
    touch "$dir/.complete"
}

# systemd-networkd picks up a changed network file; false when it is not running. (A reload
# that fails must not stop an install or an undeploy half-way.)
reload_networkd() {
    command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet systemd-networkd ||
        return 1
    networkctl reload 2>/dev/null || systemctl reload systemd-networkd || true
}

# install -m MODE SRC DST, atomically and durably: a power cut leaves the old file or the new
# one, never an empty or half-written one (a temporary beside it, synced, renamed, the folder
# synced), as the daemon writes its own state (daemon/private_files.py).
put() {
    mode=$1 src=$2 dst=$3
    mkdir -p "$(dirname "$dst")"
    install -m "$mode" "$src" "$dst.fingertip-new"
    sync "$dst.fingertip-new"
    mv -f "$dst.fingertip-new" "$dst"
    sync "$(dirname "$dst")"
}

# Units, udev rule and the USB link's network file of one release, and the config when missing.
install_system_files() {
    share=$1
    mkdir -p /etc/fingertip
    if [ -e $CONFIG ]; then
        say "keeping $CONFIG"
    else
        say "installing the default $CONFIG"
        put 0640 "$share/fingertip.toml" $CONFIG
    fi
    # The daemon reads it as the fingertip user; it may hold tokens, so no one else may.
    chgrp fingertip $CONFIG
    chmod 0640 $CONFIG
    put 0755 "$share/fingertip-hidg-role" $UDEV_HELPER
    put 0755 "$share/fingertip-link-reannounce" $LINK_HELPER
    put 0644 "$share/70-fingertip.rules" $UDEV_RULE
    put 0644 "$share/80-fingertip-usb.network" $NETWORK
    for unit in $UNITS; do put 0644 "$share/$unit" $UNIT_DIR/$unit; done
    for cmd in $COMMANDS; do ln -sfn $BASE/current/bin/$cmd /usr/local/bin/$cmd; done
    systemctl daemon-reload
    if command -v udevadm >/dev/null 2>&1; then
        udevadm control --reload
        udevadm trigger --action=add --subsystem-match=hidg --subsystem-match=video4linux
    fi
    if ! reload_networkd; then
        say "NOTE: systemd-networkd is not running: give the USB link 192.168.42.1/24 and a" \
            "DHCP server for the target yourself (see $NETWORK)"
    fi
}

switch_to() {
    # The release's files on the disk before `current` names it: a cut never leaves a current
    # release with empty files. Then the switch itself, durably.
    sync
    ln -sfn "releases/$1" $BASE/current.new
    mv -T $BASE/current.new $BASE/current
    sync $BASE
}

journal_tail() {
    journalctl -u fingertip-gadget.service -u fingertip.service -n 25 --no-pager -o cat 2>&1 |
        sed 's/^/board|   /' >&2 || true
}

restart() {
    systemctl enable --quiet $UNITS
    # Type=notify: restart returns once the daemon said READY=1, or fails.
    systemctl restart fingertip.service
}

install_release() {
    release=$1 dir=$BASE/releases/$1
    [ -f "$INCOMING/manifest" ] || fail "nothing staged in $INCOMING"
    command -v systemctl >/dev/null 2>&1 || fail "no systemctl: Fingertip runs under systemd"
    ensure_user "$INCOMING/share"
    mkdir -p $BASE/wheels $BASE/releases
    if [ -d "$INCOMING/wheels" ]; then
        find "$INCOMING/wheels" -name '*.whl' -exec mv -f {} $BASE/wheels/ \;
    fi
    pip_wheel=$(grep '^pip-' "$INCOMING/manifest" | head -n 1)
    [ -n "$pip_wheel" ] || fail "the wheelhouse has no pip wheel"
    [ -e "$BASE/wheels/$pip_wheel" ] || fail "wheel $pip_wheel missing on the board"
    make_release "$release"
    check=$CONFIG
    [ -e $CONFIG ] || check="$dir/share/fingertip.toml"
    "$dir/bin/fingertipd" --check --config "$check" >/dev/null ||
        fail "$check does not pass the new version's check (above); the running version" \
            "is untouched"

    old=""
    [ -e $BASE/current ] && old=$(basename "$(readlink -f $BASE/current)")
    install_system_files "$dir/share"
    switch_to "$release"
    say "restarting fingertip.service on $release"
    if ! restart; then
        echo "board: fingertip.service did not start on $release:" >&2
        journal_tail
        if [ -n "$old" ] && [ "$old" != "$release" ]; then
            back_to "$old"
        else # nothing to go back to: do not let systemd restart a broken daemon forever
            systemctl stop fingertip.service fingertip-gadget.service || true
        fi
        fail "release $release did not start"
    fi
    if [ -n "$old" ] && [ "$old" != "$release" ]; then
        ln -sfn "releases/$old" $BASE/previous
    fi
    prune
    rm -rf "$INCOMING"
    listen=$("$dir/bin/python" -c 'import sys, pathlib
from daemon.config import load
c = load(pathlib.Path(sys.argv[1]))
print(c.server.port, *c.server.listen)' $CONFIG)
    echo "result release=$release listen=$listen"
}

back_to() {
    say "rolling back to $1"
    install_system_files "$BASE/releases/$1/share"
    switch_to "$1"
    if systemctl restart fingertip.service; then
        say "release $1 is running again"
    else
        echo "board: the previous release $1 did not start either:" >&2
        journal_tail
    fi
}

rollback() {
    if [ -e $BASE/previous ]; then
        back_to "$(basename "$(readlink -f $BASE/previous)")"
    else
        say "no previous release to go back to; see journalctl -u fingertip"
    fi
}

# Keep the current and the previous release, their deps and the wheels they were built from.
prune() {
    keep_current=$(basename "$(readlink -f $BASE/current)")
    keep_previous=""
    [ -e $BASE/previous ] && keep_previous=$(basename "$(readlink -f $BASE/previous)")
    for entry in $BASE/releases/*; do
        [ -d "$entry" ] || continue
        name=$(basename "$entry")
        [ "$name" = "$keep_current" ] || [ "$name" = "$keep_previous" ] || rm -rf "$entry"
    done
    cat $BASE/releases/*/share/deps 2>/dev/null | sort -u >$BASE/deps.keep
    for entry in $BASE/deps/*; do
        [ -d "$entry" ] || continue
        grep -qxF "$(basename "$entry")" $BASE/deps.keep || rm -rf "$entry"
    done
    cat $BASE/releases/*/share/manifest 2>/dev/null | sort -u >$BASE/wheels.keep
    for wheel in $BASE/wheels/*.whl; do
        [ -e "$wheel" ] || continue
        grep -qxF "$(basename "$wheel")" $BASE/wheels.keep || rm -f "$wheel"
    done
    rm -f $BASE/wheels.keep $BASE/deps.keep
}

undeploy() {
    if command -v systemctl >/dev/null 2>&1; then
        say "stopping and disabling $UNITS"
        systemctl disable --now --quiet $UNITS 2>/dev/null || true
    fi
    for unit in $UNITS; do rm -f $UNIT_DIR/$unit; done
    rm -f $UDEV_RULE $UDEV_HELPER $LINK_HELPER $NETWORK
    for cmd in $COMMANDS; do rm -f /usr/local/bin/$cmd; done
    command -v systemctl >/dev/null 2>&1 && systemctl daemon-reload
    command -v udevadm >/dev/null 2>&1 && udevadm control --reload
    reload_networkd || true
    rm -rf $BASE
    say "removed; kept /etc/fingertip/ (config), /var/lib/fingertip/ (pairing token) and the" \
        "fingertip user: remove them by hand to forget them"
}

command=${1:-}
[ $# -gt 0 ] && shift
case "$command" in
probe) probe ;;
install) install_release "$@" ;;
rollback) rollback ;;
undeploy) undeploy ;;
*) fail "usage: board.sh probe | install RELEASE | rollback | undeploy" ;;
esac
