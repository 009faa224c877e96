#!/bin/sh
# Runs inside the new root filesystem (mmdebstrap --customize-hook); part of the image recipe.
set -eu
# netplan renders for systemd-networkd; it must run at boot like on Ubuntu server.
systemctl enable systemd-networkd.service
# Units that make no sense in a container (no console, no wait for links Docker already set up).
systemctl mask getty@tty1.service console-getty.service systemd-networkd-wait-online.service \
  apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer \
  systemd-timesyncd.service sys-kernel-config.mount 2>/dev/null || true
# eth0 belongs to Docker (the management network): networkd must never drop its routes or rules.
mkdir -p /etc/systemd/networkd.conf.d
cat > /etc/systemd/networkd.conf.d/10-sparkrack-lab.conf <<'CONF'
# sparkrack lab: Docker configures eth0; networkd only manages what netplan renders.
[Network]
ManageForeignRoutes=no
ManageForeignRoutingPolicyRules=no
CONF
# Keep apt usable without a fresh `apt-get update` in every container.
echo 'APT::Install-Recommends "false";' > /etc/apt/apt.conf.d/90-sparkrack-lab-norecommends
: > /etc/machine-id
