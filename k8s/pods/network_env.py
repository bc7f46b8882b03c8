"""The environment that puts NCCL and Open MPI on the right network: every GPU pod's NCCL settings,
and EFA's only on the pods that request EFA devices."""

from __future__ import annotations

from config.instance_types import InstanceType
from config.kubernetes import OFI_NCCL_NET

# Interfaces neither NCCL nor Open MPI may bootstrap over: loopback, a Docker bridge, and the EKS
# Pod Identity agent's link-local interface (pod-id-link0, 169.254.170.23), which carries no pod
# traffic. NCCL takes a "^"-prefixed exclude list, Open MPI's btl_tcp_if_exclude a plain one.
EXCLUDED_INTERFACES = ("lo", "docker0", "pod-id-link0")
NCCL_SOCKET_IFNAME = "^" + ",".join(EXCLUDED_INTERFACES)
MPI_TCP_IF_EXCLUDE = ",".join(EXCLUDED_INTERFACES)

# EFA settings belong to the pods that request EFA devices, never to an image: a pod told to use
# libfabric's EFA provider without the devices would believe it runs on EFA while NCCL falls back
# to TCP sockets. NCCL_NET_PLUGIN=ofi makes NCCL load libnccl-net-ofi.so, the name aws-ofi-nccl
# always installs (aws/aws-ofi-nccl v1.16.3 src/Makefile.am). NCCL_NET=Libfabric, the net name
# aws-ofi-nccl registers, makes NCCL fail instead of falling back to sockets when that plugin
# cannot start (see trainer/nccl_net.py, which also reads back what NCCL chose).
EFA_ENV = (("FI_PROVIDER", "efa"), ("FI_EFA_USE_DEVICE_RDMA", "1"), ("FI_EFA_FORK_SAFE", "1"),
           ("NCCL_NET_PLUGIN", "ofi"), ("NCCL_NET", OFI_NCCL_NET))


def network_env(instance: InstanceType, *, nccl_debug: str = "WARN") -> list[dict]:
    """NCCL settings on GPU pods; EFA_ENV only where the pod also requests EFA devices."""
    env: list[dict] = []
    if instance.is_gpu:
        env += [{"name": "NCCL_SOCKET_IFNAME", "value": NCCL_SOCKET_IFNAME},
                {"name": "NCCL_DEBUG", "value": nccl_debug}]
    if instance.supports_efa:
        env += [{"name": name, "value": value} for name, value in EFA_ENV]
    return env
