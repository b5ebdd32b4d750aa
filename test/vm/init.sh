#!/bin/busybox sh
# Stage 1 of the fastpath VM: the initramfs's /init. It loads the modules 9p
# and overlayfs need, mounts the host's root read-only over 9p under a tmpfs
# overlay, and starts the guest program (a host binary, named on the kernel
# command line) with the host's /bin/sh as PID 1, which reaps orphans and
# powers the VM off when the program ends. Each step is logged to the
# console, so a boot that fails says where.
/bin/busybox --install -s /bin
export PATH=/bin

step() { echo "fastpath-vm: step: $*"; }
fail() {
	echo "fastpath-vm: FAILED: $*"
	poweroff -f
}

mount -t proc proc /proc && mount -t sysfs sysfs /sys && mount -t devtmpfs devtmpfs /dev || fail "mount /proc, /sys and /dev"
step "load the initramfs modules ($(cat /modules/order | tr '\n' ' '))"
for m in $(cat /modules/order); do
	insmod "/modules/$m" || fail "insmod $m"
done

prog=
for arg in $(cat /proc/cmdline); do
	case $arg in fastpath.guest=*) prog=${arg#*=} ;; esac
done
[ -n "$prog" ] || fail "no fastpath.guest= on the kernel command line"

step "mount the host's root over 9p"
mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=512000,cache=mmap hostroot /host || fail "mount the host's root (9p tag hostroot)"
mount -t tmpfs -o mode=0755 tmpfs /rw && mkdir /rw/upper /rw/work || fail "mount the overlay's tmpfs"
mount -t overlay -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work overlay /root || fail "mount the overlay on the host's root"
[ -x "/root$prog" ] || fail "the guest program $prog is not an executable in the host's root"
[ -x /root/bin/sh ] || fail "the host's root has no /bin/sh"
for d in proc sys dev; do
	mount --move "/$d" "/root/$d" || fail "move /$d into the host's root"
done

step "start the guest program $prog"
exec switch_root /root /bin/sh -c '"$0" guest; echo "fastpath-vm: the guest program exited with status $?"; echo o >/proc/sysrq-trigger' "$prog"
