#!/bin/sh
# /init of the kernel-test VM (busybox). Loads the modules, mounts this machine's root (9p,
# read-only) with the kernel's own proc/sys/dev/configfs inside it, runs the guest pytest
# session with the project's venv in a chroot of that root, writes the exit code to the
# writable work folder and powers off. Parameters come from the kernel command line
# (fingertip.tests: the guest test folder, tests/kernel/guest unless the desktop tier's).
export PATH=/bin

mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev

while read -r mod args; do
    insmod "/lib/modules/$mod" $args || echo "init: insmod $mod $args failed"
done </modules.load

project=
kernel_root=
tests=tests/kernel/guest
for word in $(cat /proc/cmdline); do
    case "$word" in
    fingertip.project=*) project="${word#fingertip.project=}" ;;
    fingertip.kernel_root=*) kernel_root="${word#fingertip.kernel_root=}" ;;
    fingertip.tests=*) tests="${word#fingertip.tests=}" ;;
    esac
done

ninep="trans=virtio,version=9p2000.L,msize=524288"
H=/host
W=$H/run/fingertip
mount -t 9p -o "$ninep,ro,cache=loose" hostroot $H || echo "init: cannot mount the host root"
mount -t proc proc $H/proc
mount -t sysfs sys $H/sys
mount -t devtmpfs dev $H/dev
mount -t configfs configfs $H/sys/kernel/config
mount -t tmpfs tmp $H/tmp
mount -t tmpfs run $H/run
mkdir -p $W
mount -t 9p -o "$ninep,cache=none" work $W || echo "init: cannot mount the work folder"
# The project and the kernel root at their own paths (a tmpfs above may hide them otherwise);
# mkdir is only possible, and only needed, under the tmpfs mounts.
mkdir -p "$H$project" "$H$kernel_root" 2>/dev/null
mount -t 9p -o "$ninep,ro,cache=loose" project "$H$project" || echo "init: cannot mount $project"
mount -t 9p -o "$ninep,ro,cache=loose" kernel "$H$kernel_root" || echo "init: cannot mount $kernel_root"

echo "init: guest up after $(cut -d' ' -f1 /proc/uptime) s, running the tests in $project"
# Extra pytest arguments from the runner, one per line (e.g. -k, "ecm or leds").
set --
while IFS= read -r arg; do set -- "$@" "$arg"; done <$W/pytest-args
# Only the pytest plugins the guest tests use: each one costs seconds of imports under TCG.
chroot $H /usr/bin/env -i \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/tmp LANG=C.UTF-8 TERM=dumb PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    FINGERTIP_KERNEL_GUEST=1 FINGERTIP_KERNEL_ROOT="$kernel_root" PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 \
    /bin/sh -c 'cd "$1" && shift && exec .venv/bin/python -m pytest "$@"' sh "$project" \
    "$tests" -v --color=no -p no:cacheprovider -p asyncio -p aiohttp --durations=8 \
    -o junit_family=xunit1 --junitxml=/run/fingertip/junit.xml -o faulthandler_timeout=60 "$@"
echo $? >$W/exit-code
sync
poweroff -f
