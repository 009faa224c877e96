#!/bin/bash
# Capture the fabric gate's small-message sweep on a 2-GPU host: the fabric-check workload
# (nccl_allreduce.py, 8 KiB .. 1 GiB) and nccl-tests all_reduce_perf (-b 8K -e 1G), two cases each:
# the default transports (NVLink P2P) and the socket transport (P2P/SHM/IB off).
set -u
D=$(cd "$(dirname "$0")" && pwd)
W=/tmp/cap; rm -rf $W; mkdir -p $W
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NCCL_DIR=$(python3 -c 'import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])')
{
  date -u; uname -r
  nvidia-smi --query-gpu=name,driver_version --format=csv
  python3 -c 'import torch,sys;print("python",sys.version.split()[0]);print("torch",torch.__version__,"cuda",torch.version.cuda);print("nccl",torch.cuda.nccl.version())'
  python3 -m pip show nvidia-nccl-cu13 2>/dev/null | head -2
  nvcc --version | tail -2; echo "nccl dir $NCCL_DIR"; ls $NCCL_DIR/lib $NCCL_DIR/include
} > $W/machine.txt 2>&1
run_py() {
  local name=$1; shift; local port=$((29500 + RANDOM % 1000))
  for r in 0 1; do
    env "$@" CUDA_VISIBLE_DEVICES=$r RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo \
      timeout -k 5 100 python3 $D/nccl_allreduce.py > $W/$name.rank$r.log 2>&1 &
  done; wait
}
run_py py-defaults
run_py py-socket NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 SPARKRACK_MAX_BYTES=$((64<<20))
# nccl-tests
mkdir -p /tmp/nh/lib; cp -r $NCCL_DIR/include /tmp/nh/; cp -a $NCCL_DIR/lib/* /tmp/nh/lib/
[ -e /tmp/nh/lib/libnccl.so ] || ln -s libnccl.so.2 /tmp/nh/lib/libnccl.so
( cd $D/nccl-tests/src && timeout 200 make -j16 MPI=0 NCCL_HOME=/tmp/nh CUDA_HOME=$(dirname $(dirname $(which nvcc))) \
   NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=/tmp/nt /tmp/nt/all_reduce_perf ) > $W/build.txt 2>&1 || tail -30 $W/build.txt
export LD_LIBRARY_PATH=/tmp/nh/lib:${LD_LIBRARY_PATH:-}
if [ -x /tmp/nt/all_reduce_perf ]; then
  NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=lo timeout 100 /tmp/nt/all_reduce_perf -b 8K -e 1G -f 2 -g 2 > $W/perf-defaults.log 2>&1
  NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=lo NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 timeout 100 /tmp/nt/all_reduce_perf -b 8K -e 64M -f 2 -g 2 > $W/perf-socket.log 2>&1
fi
tar -C $W -czf $OUT/cap.tgz .
cat $W/machine.txt; grep -h -E "^ +[0-9]+ |Avg bus" $W/*.log | head -80; ls -la $W
