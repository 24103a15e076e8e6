#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs inside the VM for `make demo`.
set -u
ko=$1
run() {
	echo "\$ $*"
	"$@" 2>&1
}
echo "demo: start"
run insmod "$ko"
run ip netns add hostA
run ip netns add hostB
run ip link add veth0 netns hostA type veth peer name veth1 netns hostB
run ip -n hostA addr add 10.77.0.1/24 dev veth0
run ip -n hostB addr add 10.77.0.2/24 dev veth1
run ip -n hostA link set veth0 up
run ip -n hostB link set veth1 up
run ip netns exec hostA rdma link add mr0 type metaroce netdev veth0
run ip netns exec hostB rdma link add mr1 type metaroce netdev veth1
run ip netns exec hostA rdma link show
run ip netns exec hostB rdma link show
run rdma dev show
for d in mr0 mr1; do
	echo "\$ grep -H . /sys/class/infiniband/$d/ports/1/{link_layer,state,gids/0,gids/1}"
	grep -H . /sys/class/infiniband/$d/ports/1/{link_layer,state,gids/0,gids/1} 2>&1
done
run rdma link delete mr0
run rdma link delete mr1
run rmmod metaroce
echo "demo: done"
