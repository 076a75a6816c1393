#!/bin/sh
# Record two snapshots (t0/, t1/, meta/) of a real cgroup v1 or hybrid (v1 + cgroup2 at
# /sys/fs/cgroup/unified) hierarchy, laid out as fake host roots, from a VM whose /init
# (vm/init) builds docker/kubernetes-like cgroups with real workloads. IDs are random on
# every run. Adapted from shared/tools/v2-recorder/record.sh.
#
# usage: ./record-v1.sh v1|hybrid DEST
#
# Needs (Debian 12, root): gcc libc6-dev and
#   apt-get install -y --no-install-recommends qemu-system-x86 linux-image-cloud-amd64 busybox-static cpio
# Runs a busybox-initramfs VM under qemu TCG (software emulation; KVM is not needed).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
MODE=${1:?usage: record-v1.sh v1|v1sep|hybrid DEST}
DEST=${2:?usage: record-v1.sh v1|hybrid DEST}
case $MODE in v1|v1sep|hybrid) ;; *) echo "mode must be v1, v1sep or hybrid" >&2; exit 2;; esac
SRC=$HERE/vm
WORK=${WORK:-${TMPDIR:-/tmp}/cgstat-rec-$MODE/work}
KVER=${KVER:-$(ls /boot/vmlinuz-*-cloud-amd64 | sed 's|/boot/vmlinuz-||' | sort -V | tail -1)}
KERNEL=/boot/vmlinuz-$KVER
MODDIR=/lib/modules/$KVER/kernel

rm -rf "$WORK"
mkdir -p "$WORK/root"
R=$WORK/root
mkdir -p $R/bin $R/sbin $R/usr/bin $R/usr/sbin $R/lib/modules $R/etc $R/proc $R/sys \
         $R/dev $R/run $R/tmp $R/snap
cp /bin/busybox $R/bin/busybox
for p in $(/bin/busybox --list-full); do
	[ -e "$R/$p" ] || ln -s /bin/busybox "$R/$p"
done
gcc -O2 -static -o $R/bin/snap  "$SRC/snap.c"
gcc -O2 -static -o $R/bin/runas "$SRC/runas.c"
gcc -O2 -static -o $R/usr/bin/pause "$SRC/pause.c"
cp $R/usr/bin/pause $R/usr/bin/conmon          # comm "conmon" for the cri-o monitor scopes
strip $R/bin/snap $R/bin/runas $R/usr/bin/pause $R/usr/bin/conmon
for m in drivers/virtio/virtio_ring drivers/virtio/virtio drivers/virtio/virtio_pci_legacy_dev \
         drivers/virtio/virtio_pci_modern_dev drivers/virtio/virtio_pci drivers/block/virtio_blk; do
	cp "$MODDIR/$m.ko" $R/lib/modules/
done
cp "$SRC/init" $R/init
chmod 755 $R/init
printf 'root:x:0:0:root:/root:/bin/sh\npodman:x:1000:1000:podman:/home/podman:/bin/sh\n' > $R/etc/passwd
printf 'root:x:0:\npodman:x:1000:\n' > $R/etc/group
mknod $R/dev/console c 5 1
mknod $R/dev/null c 1 3
(cd $R && find . | cpio -o -H newc --quiet | gzip -1) > $WORK/init.cpio.gz

truncate -s 32M $WORK/io.img      # /dev/vda: target of layout D's direct io
truncate -s 64M $WORK/out.img     # /dev/vdb: raw tar with the snapshots
echo "booting $KERNEL (qemu tcg; takes ~1-2 min)..."
timeout 900 qemu-system-x86_64 -accel tcg,thread=multi -m 1024 -smp 4 -nographic -no-reboot -nic none \
	-kernel "$KERNEL" -initrd $WORK/init.cpio.gz \
	-drive file=$WORK/io.img,format=raw,if=virtio \
	-drive file=$WORK/out.img,format=raw,if=virtio \
	-append "console=ttyS0 quiet panic=-1 cgmode=$MODE" </dev/null > $WORK/console.log 2>&1 || true
grep -a '@@' $WORK/console.log | tr -d '\r'
grep -aq '@@TAR_OK' $WORK/console.log || { echo "VM did not finish, see $WORK/console.log" >&2; exit 1; }

mkdir -p $WORK/out
tar -xf $WORK/out.img -C $WORK/out
mkdir -p "$DEST"
rm -rf "$DEST/t0" "$DEST/t1" "$DEST/meta"
cp -a $WORK/out/t0 $WORK/out/t1 $WORK/out/meta "$DEST/"
tr -d '\r' < $WORK/console.log > "$DEST/meta/console.log"
python3 "$HERE/summarize_v1.py" "$DEST" > "$DEST/meta/summary.txt" || true
echo "written: $DEST/t0 $DEST/t1 $DEST/meta"
