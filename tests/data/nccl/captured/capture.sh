#!/bin/bash
# Capture the NCCL INFO logs of this folder on a host with 2 GPUs (one process per GPU, the
# fabric-check all-reduce), into $OUT/ncclcap.tgz. See README.md for the machine and the cases.
set -u
ROOT=$(cd "$(dirname "$0")/../../../.." && pwd)
W=/tmp/ncclcap; rm -rf $W; mkdir -p $W
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{
  date -u; uname -a; hostname
  nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv
  nvidia-smi topo -m
  python3 -c 'import torch,sys;print("python",sys.version.split()[0]);print("torch",torch.__version__,"cuda",torch.version.cuda);print("nccl",torch.cuda.nccl.version());print("gpus",torch.cuda.device_count())'
  python3 -m pip show nvidia-nccl-cu13 2>/dev/null | head -3
  echo "--- /dev/infiniband:"; ls -la /dev/infiniband 2>&1
  echo "--- /sys/class/infiniband:"; ls -la /sys/class/infiniband 2>&1
  echo "--- tools:"; for t in ibv_devinfo ib_write_bw rdma show_gids; do command -v $t || echo "$t: absent"; done
  echo "--- netdevs:"; ls /sys/class/net
} > $W/machine.txt 2>&1
run_case() {  # name, then env assignments
  local name=$1; shift
  local port=$((29500 + RANDOM % 1000))
  echo "=== $name: $*" >> $W/summary.txt
  local s=$(date +%s)
  for r in 0 1; do
    env "$@" CUDA_VISIBLE_DEVICES=$r RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      SPARKRACK_MAX_BYTES=$((64<<20)) NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo \
      timeout -k 5 100 python3 "$ROOT/sparkrack/data/fabric-check/nccl_allreduce.py" > $W/$name.rank$r.log 2>&1 &
  done
  wait; echo "rc/elapsed: done in $(( $(date +%s) - s ))s" >> $W/summary.txt
  grep -h -E "NET/|Using network|via NET|Failed|WARN|Error|error|Avg bus|^ +[0-9]+ " $W/$name.rank*.log | head -40 >> $W/summary.txt
}
run_case socket NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_DEBUG_SUBSYS=INIT,NET
run_case ib_forced_exact_hca NCCL_NET=IB NCCL_IB_HCA==rocep1s0f0v0,roceP2p1s0f0v0
run_case ib_forced NCCL_NET=IB
run_case ib_forced_subsys NCCL_NET=IB NCCL_IB_HCA==rocep1s0f0v0 NCCL_DEBUG_SUBSYS=INIT,NET
run_case defaults
run_case bogus_net NCCL_NET=Bogus
run_case silent_fallback NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_HCA==rocep1s0f0v0
tar -C $W -czf $OUT/ncclcap.tgz .
cp $W/summary.txt $W/machine.txt $OUT/
cat $W/summary.txt | head -150
