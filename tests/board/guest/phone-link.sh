#!/bin/sh
# The phone's end of the USB network link, run inside the board VM by the board test.
# A phone configures its USB network when the link appears and drops its connections when the
# link goes. Here: every cdc_ether interface that appears (each enumeration of the gadget
# makes a new one) moves into network namespace "phone" with a static address, and when it
# goes away the phone's TCP connections to the board are destroyed (ss -K, as Android's
# network stack does), so a client waiting for an answer sees its connection lost.
NS=phone
ADDR=192.168.42.2/24
BOARD=192.168.42.1

ip netns add $NS 2>/dev/null || true
ip -n $NS link set lo up

adopt() {
    udevadm settle --timeout=10 # let udev finish with a new interface (its rename) first
    for n in /sys/class/net/*; do
        driver=$(readlink -f "$n/device/driver" 2>/dev/null) || continue
        [ "${driver##*/}" = cdc_ether ] || continue
        i=${n##*/}
        ip link set "$i" netns $NS &&
            ip -n $NS addr add $ADDR dev "$i" &&
            ip -n $NS link set "$i" up &&
            echo "phone-link: up $i"
    done
}

ip -n $NS monitor link | while read -r line; do
    case "$line" in
    Deleted*)
        ip netns exec $NS ss -K dst $BOARD >/dev/null 2>&1
        echo "phone-link: down"
        ;;
    esac
done &

# The monitor starts before the first scan, so an interface appearing in between is not missed.
ip monitor link | {
    adopt
    echo "phone-link: ready"
    while read -r _; do adopt; done
}
