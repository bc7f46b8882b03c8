"""etcd for torch's etcd-v2 rendezvous: one member, reachable only from training pods.

etcd 3.5 still serves the v2 API behind --enable-v2 (3.6 removed it), which torch's etcd
rendezvous backends speak. Rendezvous state is ephemeral: a restart forgets rounds in progress and
the agents start a new one, so the data lives on an emptyDir.
"""

from __future__ import annotations

from dataclasses import dataclass

import cdk8s
import cdk8s_plus_27 as kplus
from constructs import Construct

from config.kubernetes import ROLE_LABEL, SYSTEM_ROLE, TRAINING_NAMESPACE
from k8s.base import (
    ProjectChart, drop_all_capabilities, hardened, patch_pod_spec, resources, runtime_default_seccomp, select_own_pods,
)
from k8s.common import CONTROL_PRIORITY_CLASS, ETCD_CLIENT_LABEL, ETCD_CLIENT_PORT, ETCD_SERVICE, IMAGES, NONROOT_UID

PEER_PORT = 2380
DATA_DIR = "/var/run/etcd"
# Any non-root uid works (the image, distroless static, sets no USER): the emptyDir is
# world-writable and fsGroup owns it.
ETCD_UID = NONROOT_UID


@dataclass(frozen=True)
class EtcdProps:
    # Where etcd listens is not a prop: k8s/jobs.py points every job's rendezvous at these same
    # constants, and a prop that moved one side would silently cut the jobs off.
    image: str = IMAGES["etcd"]
    cpu_milli: int = 250
    memory_mib: int = 512


class EtcdChart(ProjectChart):
    component = "rendezvous"
    addon = "etcd"
    depends_on = ("namespaces", "priority-classes")

    def __init__(self, scope: Construct, id: str, *, props: EtcdProps = EtcdProps()):
        super().__init__(scope, id, namespace=TRAINING_NAMESPACE)
        name = ETCD_SERVICE
        advertise = f"http://{name}.{TRAINING_NAMESPACE}.svc:{ETCD_CLIENT_PORT}"
        peer = f"http://127.0.0.1:{PEER_PORT}"

        self.deployment = kplus.Deployment(
            self, "Deployment", metadata=self.meta(name), replicas=1,
            # Never two members with separate state: the old pod goes before the new one starts.
            strategy=kplus.DeploymentStrategy.recreate(),
            automount_service_account_token=False,
            security_context=kplus.PodSecurityContextProps(ensure_non_root=True, user=ETCD_UID,
                                                           group=ETCD_UID, fs_group=ETCD_UID),
            select=False,
        )
        own_pods = select_own_pods(self.deployment, name)
        health = ["/usr/local/bin/etcdctl", f"--endpoints=http://127.0.0.1:{ETCD_CLIENT_PORT}",
                  "--command-timeout=3s", "endpoint", "health"]
        container = self.deployment.add_container(
            name="etcd", image=props.image, image_pull_policy=kplus.ImagePullPolicy.IF_NOT_PRESENT,
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
            ports=[kplus.ContainerPort(number=ETCD_CLIENT_PORT, name="client")],
            # exec probes: they work whatever the NetworkPolicy lets through from the node.
            liveness=kplus.Probe.from_command(health, initial_delay_seconds=cdk8s.Duration.seconds(10),
                                              period_seconds=cdk8s.Duration.seconds(20),
                                              timeout_seconds=cdk8s.Duration.seconds(5)),
            readiness=kplus.Probe.from_command(health, period_seconds=cdk8s.Duration.seconds(10),
                                               timeout_seconds=cdk8s.Duration.seconds(5)),
            resources=resources(props.cpu_milli, props.memory_mib),
            security_context=hardened(ensure_non_root=True, user=ETCD_UID, group=ETCD_UID),
        )
        container.mount(DATA_DIR, kplus.Volume.from_empty_dir(self, "Data", "data"))
        drop_all_capabilities(self.deployment)
        runtime_default_seccomp(self.deployment)
        # On the system nodes only (required, not preferred): never on a training node, where a
        # scale-in, a capacity block's end or a drained GPU node would take rendezvous with it.
        self.deployment.scheduling.attract(kplus.Node.labeled(kplus.NodeLabelQuery.is_(ROLE_LABEL, SYSTEM_ROLE)))
        patch_pod_spec(self.deployment, "priorityClassName", CONTROL_PRIORITY_CLASS)

        # Selected by the readable name label, the one k8s/network.py's egress rule for etcd clients
        # names: the VPC CNI allows egress to a Service's ClusterIP only when a rule's podSelector
        # matches the Service's own selector (aws/amazon-network-policy-controller-k8s,
        # getMatchingServiceClusterIPs).
        self.service = kplus.Service(
            self, "Service", metadata=self.meta(name), selector=kplus.Pods.select(self, "Members", labels=own_pods),
            ports=[kplus.ServicePort(name="client", port=ETCD_CLIENT_PORT, target_port=ETCD_CLIENT_PORT)],
        )

        # Only pods that declare themselves rendezvous clients (the PyTorchJob workers) get in.
        self.network_policy = kplus.NetworkPolicy(
            self, "NetworkPolicy", metadata=self.meta(f"{name}-clients-only"), selector=self.deployment,
            ingress=kplus.NetworkPolicyTraffic(default=kplus.NetworkPolicyTrafficDefault.DENY),
        )
        clients = kplus.Pods.select(self, "Clients", labels={ETCD_CLIENT_LABEL: "true"})
        self.network_policy.add_ingress_rule(clients, [kplus.NetworkPolicyPort.tcp(ETCD_CLIENT_PORT)])
