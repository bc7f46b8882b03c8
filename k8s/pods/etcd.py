"""etcd's pod: one member for torch's etcd-v2 rendezvous, on the system nodes.

etcd 3.5 still serves the v2 API behind --enable-v2 (3.6 removed it), which torch's etcd
rendezvous backends speak. Rendezvous state is ephemeral: a restart forgets rounds in progress and
the agents start a new one, so the data lives on an emptyDir.
"""

from __future__ import annotations

from config.kubernetes import ROLE_LABEL, SYSTEM_ROLE, TRAINING_NAMESPACE
from k8s.pods.images import IMAGES
from k8s.pods.names import CONTROL_PRIORITY_CLASS, ETCD_CLIENT_PORT, ETCD_SERVICE
from k8s.pods.resources import fixed_resources
from k8s.pods.security import NONROOT_UID
from k8s.pods.workload import (
    container, deployment, exec_probe, hardened_container_security_context, hardened_pod_security_context, own_pods,
    pod_spec, required_node_affinity,
)

PEER_PORT = 2380
DATA_DIR = "/var/run/etcd"
# Any non-root uid works (the image, distroless static, sets no USER): the emptyDir is
# world-writable and fsGroup owns it.
ETCD_UID = NONROOT_UID
# The address label cdk8s-plus gave etcd's pods (k8s/pods/workload.py); its Service and
# NetworkPolicy (k8s/addons/etcd.py) still select them by it.
POD_ADDRESS = "etcd-Deployment-c86ea256"
POD_LABELS = own_pods(ETCD_SERVICE, POD_ADDRESS)


def etcd_deployment(*, image: str = IMAGES["etcd"], cpu_milli: int = 250, memory_mib: int = 512) -> dict:
    """Where etcd listens is no argument: k8s/pods/pytorchjob.py points every job's rendezvous at
    these same constants, and an argument that moved one side would silently cut the jobs off."""
    name = ETCD_SERVICE
    advertise = f"http://{name}.{TRAINING_NAMESPACE}.svc:{ETCD_CLIENT_PORT}"
    peer = f"http://127.0.0.1:{PEER_PORT}"
    health = ["/usr/local/bin/etcdctl", f"--endpoints=http://127.0.0.1:{ETCD_CLIENT_PORT}",
              "--command-timeout=3s", "endpoint", "health"]
    member = container(
        name="etcd", image=image, resources=fixed_resources(cpu_milli, memory_mib),
        security_context=hardened_container_security_context(ETCD_UID),
        command=[
            "/usr/local/bin/etcd", f"--name={name}", f"--data-dir={DATA_DIR}/data",
            f"--listen-client-urls=http://0.0.0.0:{ETCD_CLIENT_PORT}",
            f"--advertise-client-urls={advertise}",
            # A single member: peers only ever talk over loopback.
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster={name}={peer}",
            "--enable-v2=true",
            # Rendezvous keys churn with every job; keep the history short.
            "--auto-compaction-mode=periodic", "--auto-compaction-retention=1h",
        ],
        ports=[{"containerPort": ETCD_CLIENT_PORT, "name": "client"}],
        # exec probes: they work whatever the NetworkPolicy lets through from the node.
        livenessProbe=exec_probe(health, initial_delay_s=10, period_s=20, timeout_s=5),
        readinessProbe=exec_probe(health, period_s=10, timeout_s=5),
        volumeMounts=[{"name": "data", "mountPath": DATA_DIR}],
    )
    pod = pod_spec(
        containers=[member], security_context=hardened_pod_security_context(ETCD_UID, fs_group=True),
        volumes=[{"name": "data", "emptyDir": {}}],
        # On the system nodes only (required, not preferred): never on a training node, where a
        # scale-in, a capacity block's end or a drained GPU node would take rendezvous with it.
        affinity=required_node_affinity(ROLE_LABEL, [SYSTEM_ROLE]),
        priorityClassName=CONTROL_PRIORITY_CLASS,
    )
    # Never two members with separate state: the old pod goes before the new one starts.
    return deployment(name=name, namespace=TRAINING_NAMESPACE, replicas=1, pod_labels=POD_LABELS, pod=pod,
                      recreate=True)
