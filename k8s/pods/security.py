"""The one hardened securityContext: every pod template we render takes its pod and container
halves from here (the add-on workloads through k8s/pods/workload.py, the jobs directly).

The pod half is the restricted Pod Security profile's: a numeric non-root user and group, and the
container runtime's default seccomp profile (none of these workloads makes unusual syscalls). The
container half: no privilege escalation and no Linux capability. Only the device plugins differ,
each in its own module, as their upstream manifests do.
"""

from __future__ import annotations

# Numeric users: the kubelet can only enforce runAsNonRoot for images whose USER is numeric, and
# the add-ons' images set none, so the pods choose. 65532 is distroless's "nonroot" uid, 65534 "nobody".
NONROOT_UID = 65532
NOBODY_UID = 65534

# The trainer images' USER, numeric so the kubelet can enforce runAsNonRoot (config/kubernetes.py).
from config.kubernetes import TRAINER_UID  # noqa: E402,F401  (re-exported for the pods of the trainer image)

# Privileged containers always run Unconfined whatever the profile ("Seccomp and Kubernetes",
# https://kubernetes.io/docs/reference/node/seccomp/).
RUNTIME_DEFAULT_SECCOMP = {"type": "RuntimeDefault"}


def pod_security_context(uid: int, *, fs_group: bool = False) -> dict:
    """A numeric non-root user and group, and the runtime's default seccomp profile. `fs_group`
    only for pods whose volumes are all their own (etcd's emptyDir): on FSx the kubelet would
    chown the whole file system."""
    context = {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid,
               "seccompProfile": dict(RUNTIME_DEFAULT_SECCOMP)}
    if fs_group:
        context["fsGroup"] = uid
    return context


def container_security_context(*, read_only_root_filesystem: bool = False) -> dict:
    """No privilege escalation and no Linux capability. EFA needs none: a pod requests
    vpc.amazonaws.com/efa and hugepages-2Mi ("Manage EFA devices on Amazon EKS", Amazon EKS User
    Guide), the device plugin hands it the /dev/infiniband/uverbs* devices, which the kernel creates
    world read-write (uverbs_devnode, drivers/infiniband/core/uverbs_main.c), and the memory it
    registers counts against RLIMIT_MEMLOCK, which the node's container runtime must raise."""
    context: dict = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    if read_only_root_filesystem:
        context["readOnlyRootFilesystem"] = True
    return context
