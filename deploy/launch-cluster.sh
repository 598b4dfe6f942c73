#!/bin/bash
# Starts a coordinator on this host and an agent on each host given, over ssh.
#   deploy/launch-cluster.sh COORD_HOST NODE_HOST... (binaries in /usr/local/bin)
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 COORD_HOST NODE_HOST..." >&2; exit 2; }
coord=$1
shift
ssh "$coord" "mkdir -p /var/lib/farpage && nohup farpage-coordinator --listen 0.0.0.0:7700 --data-dir /var/lib/farpage >/var/log/farpage-coordinator.log 2>&1 &"
for h in "$@"; do
	ssh "$h" "nohup farpage-node --coordinator $coord:7700 --name $h --pool-size \${POOL:-4G} >/var/log/farpage-node.log 2>&1 &"
done
sleep 2
farpage --coordinator "$coord:7700" status
