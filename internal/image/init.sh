#!/bin/busybox sh
# PandaStack initramfs /init: load the virtio modules (they are modules in Debian's cloud kernel,
# and microvm finds its devices through ACPI), mount the rootfs from /dev/vda and hand over to the
# guest agent as PID 1.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# Order matters: each module needs the ones before it.
for m in virtio_ring virtio virtio_mmio failover net_failover virtio_net virtio_blk virtio_console; do
  insmod /lib/modules/$m.ko 2>/dev/null
done
case " $(cat /proc/cmdline) " in
  *" pandastack.probe=1 "*)
    # Accelerator probe: prove the kernel reached userspace, then power off.
    echo PANDASTACK-PROBE-OK > /dev/ttyS0
    poweroff -f
    ;;
esac
i=0
while [ ! -b /dev/vda ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done
if ! mount -t ext4 -o noatime /dev/vda /newroot; then
  echo "pandastack-init: cannot mount /dev/vda" > /dev/ttyS0
  poweroff -f
fi
if ip link show eth0 >/dev/null 2>&1; then
  # Same address in every sandbox: it is baked into the snapshot; the host side NATs to it.
  ip link set lo up
  ip addr add 10.0.2.15/24 dev eth0
  ip link set eth0 up
  ip route add default via 10.0.2.1
fi
mount --move /proc /newroot/proc
mount --move /sys /newroot/sys
mount --move /dev /newroot/dev
mount -t tmpfs -o mode=1777 tmpfs /newroot/tmp
exec switch_root /newroot /usr/local/bin/pandastack-guest
