#!/bin/sh
# Makes the VM a node as an operator would, before `kubeadm join`: litelet's own .deb,
# the one-time kubeadm step of the README, containerd configured for the given cgroup
# driver with a bridge pod network, the test images, and the node's address.
# Usage: node-setup.sh cgroupfs|systemd [swap]   (environment: /task/task.env)
# "swap" turns on a 256 MiB swap file first.
set -eu
. /task/task.env
driver=$1
if [ "${2:-}" = swap ]; then
  fallocate -l 256M /swapfile && chmod 600 /swapfile && mkswap -q /swapfile && swapon /swapfile
fi
dpkg -i /task/litelet.deb
# The README's one-time step for kubeadm nodes.
install -D -m 0644 /usr/share/litelet/kubeadm/10-kubeadm.conf \
  /etc/systemd/system/litelet.service.d/10-kubeadm.conf
ln -sf /lib/systemd/system/litelet.service /etc/systemd/system/kubelet.service
systemctl daemon-reload
# The package started litelet standalone (node server on 10250); restarted with the
# drop-in it waits for kubeadm's files instead, and kubeadm's preflight finds the port free.
systemctl restart litelet
install -m 0755 /task/kubeadm /usr/local/bin/kubeadm

systemd_cgroup=false; [ "$driver" = systemd ] && systemd_cgroup=true
mkdir -p /etc/containerd
containerd config default \
  | sed -e "s/SystemdCgroup = .*/SystemdCgroup = $systemd_cgroup/" \
        -e 's#sandbox_image = .*#sandbox_image = "localhost/litelet/pause:1.0"#' \
        -e 's#bin_dir = .*#bin_dir = "/usr/lib/cni"#' > /etc/containerd/config.toml
mkdir -p /etc/cni/net.d
cat > /etc/cni/net.d/10-litelet.conflist <<'JSON'
{"cniVersion": "0.4.0", "name": "litelet-vm", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "loopback"}]}
JSON
systemctl restart containerd
ctr -n k8s.io images import /task/busybox.tar >/dev/null
ctr -n k8s.io images import /task/pause.tar >/dev/null

# kubeadm's prerequisite (its preflight checks it): the node forwards IPv4.
sysctl -qw net.ipv4.ip_forward=1
ip addr add "$NODE_IP/32" dev lo
echo "KUBELET_EXTRA_ARGS=--node-ip=$NODE_IP" > /etc/default/kubelet
# As the kubeadm documentation says: enable the kubelet before the join; it restarts
# every 10 s until `kubeadm join` writes its configuration.
systemctl enable --now litelet
echo "set up for the $driver driver; kubelet --version: $(kubelet --version)"
