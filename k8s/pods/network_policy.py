"""Which pod may talk to what: the NetworkPolicies of every namespace we create, as plain dicts.

The network-policies add-on (k8s/addons/network_policies.py) deploys the namespace-wide policies and
the peers policies of the jobs whose names are fixed (validation's smoke run, the runs earlier
releases deployed under their preset's name) or that it selects by label (the NCCL sweep's pairs,
`nccl_group_peers_policy`); `ops start` and `ops submit` create each run's peers policy
(`job_peers_policy`, or `trainjob_peers_policy` under trainingApi v2) beside the run, from the same
functions.

Both namespaces deny everything by default, in and out. Then, exactly:

| from | to | port | why |
|---|---|---|---|
| every training pod | kube-dns (kube-system) | 53 UDP/TCP | Service names (etcd, worker 0) |
| a job's pods | the same job's pods | every TCP port | torchrun's c10d store, gloo and NCCL bootstrap, Open MPI: ephemeral ports |
| an NCCL sweep pair's pods | the pods of the same node group's sweep | every TCP port | mpirun's daemons and NCCL bootstrap; a sweep's pairs are named at run time |
| pods labelled ETCD_CLIENT_LABEL | etcd | 2379 | etcd rendezvous; etcd itself admits only them (k8s/addons/etcd.py) |
| pods labelled API_CLIENT_LABEL | the API server | 443 | the MPI launcher's and the capacity-block stop CronJob's kubectl |
| pods labelled HTTPS_EGRESS_LABEL | outside the VPC and the service ranges | 443 | S3 (data Jobs), the Hugging Face hub (model download) |
| pods labelled POD_IDENTITY_LABEL | the Pod Identity agent | 80 | AWS credentials of the data Jobs |
| the API server (its ENIs in the VPC) | the Training Operator | 9443 | the validating webhook |
| the Training Operator | the API server | 443 | it reconciles jobs |

Not allowed, on purpose: the operator's metrics port (nothing in the cluster scrapes it; the
CloudWatch agent collects Container Insights from the kubelet), and FSx for Lustre from pods (the
Lustre client runs in the node's kernel, so its traffic leaves from the node, not the pod). Probes
come from the pod's own node, which a NetworkPolicy never blocks ("Network Policies", Kubernetes
docs, "What you can't do with network policies"). EFA traffic bypasses the IP stack altogether.

The Amazon VPC CNI enforces these once its network policy agent is on (config/addons.py,
`enableNetworkPolicy`; "Limit pod traffic with Kubernetes network policies", Amazon EKS User Guide).
It filters on the pod's own interface before the node translates a Service address, so egress to a
Service is allowed by the Service's ClusterIP: for the `kubernetes` Service that is the first
address of the service range, which EKS takes from 10.100.0.0/16 or 172.20.0.0/16 when none is given
(EKS API Reference, KubernetesNetworkConfigResponse.serviceIpv4Cidr), so both are listed.
"""

from __future__ import annotations

from config.kubernetes import (
    JOBSET_CONTROLLER, KUBEFLOW_SYSTEM_NAMESPACE, NCCL_GROUP_LABEL, OPERATOR_JOB_NAME_LABEL, TRAINER_CONTROLLER,
    TRAINING_NAMESPACE, nccl_sweep_peers_policy_name,
)
from k8s.pods.jobset import WEBHOOK_PORT as JOBSET_WEBHOOK_PORT
from k8s.pods.names import (
    API_CLIENT_LABEL, ETCD_CLIENT_LABEL, ETCD_CLIENT_PORT, ETCD_SERVICE, HTTPS_EGRESS_LABEL, KUBE_SYSTEM_NAMESPACE,
    KUBEFLOW_NAMESPACE, NAME_LABEL, POD_IDENTITY_LABEL, TRAINING_OPERATOR, TRAINING_OPERATOR_WEBHOOK_PORT,
)
from k8s.pods.trainer_v2 import PORTS as TRAINER_PORTS
from k8s.pods.trainjob import JOBSET_NAME_LABEL

API_VERSION = "networking.k8s.io/v1"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace
KUBE_DNS_LABELS = {"k8s-app": "kube-dns"}  # the coredns add-on's pods
DNS_PORT = 53
HTTPS_PORT = 443
# The service ranges EKS picks from, and the `kubernetes` Service's ClusterIP in each.
SERVICE_RANGES = ("10.100.0.0/16", "172.20.0.0/16")
API_SERVICE_ADDRESSES = ("10.100.0.1/32", "172.20.0.1/32")
# "Understand how EKS Pod Identity works": the agent serves credentials at 169.254.170.23, port 80.
POD_IDENTITY_AGENT = "169.254.170.23/32"
POD_IDENTITY_PORT = 80


def network_policy(name: str, namespace: str, selector: dict, *, ingress: list | None = None,
                   egress: list | None = None, description: str = "") -> dict:
    """A NetworkPolicy of the pods `selector` picks: ingress and egress as given; an empty list
    denies that direction, None leaves it alone."""
    types = (["Ingress"] if ingress is not None else []) + (["Egress"] if egress is not None else [])
    spec: dict = {"podSelector": selector, "policyTypes": types}
    if ingress:
        spec["ingress"] = ingress
    if egress:
        spec["egress"] = egress
    metadata: dict = {"name": name, "namespace": namespace}
    if description:
        metadata["annotations"] = {"eks-distributed-training.io/description": description}
    return {"apiVersion": API_VERSION, "kind": "NetworkPolicy", "metadata": metadata, "spec": spec}


def match_labels(**labels: str) -> dict:
    return {"matchLabels": dict(labels)}


def tcp_ports(*ports: int) -> list[dict]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def api_server_peers(vpc_cidr: str) -> list[dict]:
    """Where the API server is, as a pod's egress sees it: the `kubernetes` Service address, and the
    control plane's ENIs in the VPC (for clients that dial the endpoint's own addresses)."""
    return [{"ipBlock": {"cidr": cidr}} for cidr in (*API_SERVICE_ADDRESSES, vpc_cidr)]


def default_deny(namespace: str) -> dict:
    return network_policy("default-deny", namespace, {}, ingress=[], egress=[],
                   description="no traffic in or out unless another policy of this namespace allows it")


def training_policies(vpc_cidr: str, namespace: str = TRAINING_NAMESPACE) -> list[dict]:
    """The training namespace's policies that hold whatever jobs run (jobs add job_peers_policy)."""
    return [
        default_deny(namespace),
        network_policy("dns", namespace, {}, egress=[{
            "to": [{"namespaceSelector": match_labels(**{NAMESPACE_NAME_LABEL: KUBE_SYSTEM_NAMESPACE}),
                    "podSelector": match_labels(**KUBE_DNS_LABELS)}],
            "ports": [{"protocol": "UDP", "port": DNS_PORT}, {"protocol": "TCP", "port": DNS_PORT}]}],
            description="every pod resolves Service names through kube-dns"),
        network_policy("etcd-clients", namespace, match_labels(**{ETCD_CLIENT_LABEL: "true"}), egress=[{
            "to": [{"podSelector": match_labels(**{NAME_LABEL: ETCD_SERVICE})}], "ports": tcp_ports(ETCD_CLIENT_PORT)}],
            description="jobs with etcd rendezvous reach etcd's client port"),
        network_policy("api-clients", namespace, match_labels(**{API_CLIENT_LABEL: "true"}), egress=[{
            "to": api_server_peers(vpc_cidr), "ports": tcp_ports(HTTPS_PORT)}],
            description="pods that call the Kubernetes API (the MPI launcher) reach it"),
        network_policy("https-egress", namespace, match_labels(**{HTTPS_EGRESS_LABEL: "true"}), egress=[{
            # Services too: a ClusterIP lies outside the VPC, and the agent filters on it (the API
            # server's `kubernetes` Service, every webhook's Service on 443).
            "to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": [vpc_cidr, *SERVICE_RANGES]}}],
            "ports": tcp_ports(HTTPS_PORT)}],
            description="the data and model-download Jobs reach S3 and the Hugging Face hub, nothing in the VPC"),
        network_policy("pod-identity", namespace, match_labels(**{POD_IDENTITY_LABEL: "true"}), egress=[{
            "to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT}}], "ports": tcp_ports(POD_IDENTITY_PORT)}],
            description="pods with a Pod Identity role fetch its credentials from the node's agent"),
    ]


def webhook_controller_policy(name: str, namespace: str, vpc_cidr: str, webhook_port: int, description: str) -> dict:
    """A controller that serves admission webhooks: the API server reaches the webhook from its ENIs
    in the cluster's subnets, which pods share, so the rule is the VPC's range on the webhook port
    only (that port serves TLS admission reviews); the controller calls the API server."""
    return network_policy(
        name, namespace, match_labels(**{NAME_LABEL: name}),
        ingress=[{"from": [{"ipBlock": {"cidr": vpc_cidr}}], "ports": tcp_ports(webhook_port)}],
        egress=[{"to": api_server_peers(vpc_cidr), "ports": tcp_ports(HTTPS_PORT)}], description=description)


def operator_policies(vpc_cidr: str, namespace: str = KUBEFLOW_NAMESPACE) -> list[dict]:
    """The operator's namespace: its webhook from the API server, its calls to the API server."""
    return [
        default_deny(namespace),
        webhook_controller_policy(TRAINING_OPERATOR, namespace, vpc_cidr, TRAINING_OPERATOR_WEBHOOK_PORT,
                                  "the API server calls the validating webhook; the operator calls the API server"),
    ]


def trainer_v2_policies(vpc_cidr: str, namespace: str = KUBEFLOW_SYSTEM_NAMESPACE) -> list[dict]:
    """kubeflow-system under trainingApi v2: Kubeflow Trainer's and JobSet's webhooks from the API
    server, their calls to the API server; nothing else reaches them (no metrics scraper is deployed)."""
    webhooks = {TRAINER_CONTROLLER: TRAINER_PORTS["webhook"], JOBSET_CONTROLLER: JOBSET_WEBHOOK_PORT}
    return [default_deny(namespace), *(
        webhook_controller_policy(name, namespace, vpc_cidr, port,
                                  "the API server calls the admission webhooks; the controller calls the API server")
        for name, port in webhooks.items())]


def _peers_policy(name: str, namespace: str, selector: dict, description: str) -> dict:
    """Every TCP port between the pods `selector` picks, and nothing to or from other pods:
    rendezvous (c10d's store on 29400), gloo, NCCL's bootstrap and Open MPI all listen on
    ephemeral ports."""
    return network_policy(name, namespace, selector,
                   ingress=[{"from": [{"podSelector": selector}], "ports": [{"protocol": "TCP"}]}],
                   egress=[{"to": [{"podSelector": selector}], "ports": [{"protocol": "TCP"}]}],
                   description=description)


def job_peers_policy(job: dict) -> dict:
    """The pods of one PyTorchJob or MPIJob talk to each other, and to no other job's. Named
    `<job>-peers`; the job's `uid`, where the manifest has one, makes it go when the job goes."""
    return _run_peers_policy(job, OPERATOR_JOB_NAME_LABEL)


def trainjob_peers_policy(trainjob: dict) -> dict:
    """The pods of one TrainJob talk to each other, and to no other run's. Trainer v2.3.0 builds a
    JobSet of the TrainJob's name, and JobSet v0.12.0 labels each of its pods with that name
    (JOBSET_NAME_LABEL: its pod webhooks select on the key, ../shared/contracts/jobset-v0.12.0/
    components-webhook-patches-mutating-patch.yaml:15). Named `<run>-peers` as job_peers_policy names
    a PyTorchJob's, so one name is one run's whatever its API; owned by the TrainJob where the
    manifest has its `uid`."""
    return _run_peers_policy(trainjob, JOBSET_NAME_LABEL)


def _run_peers_policy(run: dict, pod_label: str) -> dict:
    """`<run>-peers`: the pods whose `pod_label` is the run's name talk to each other."""
    name, namespace = run["metadata"]["name"], run["metadata"].get("namespace", TRAINING_NAMESPACE)
    policy = _peers_policy(f"{name}-peers", namespace, match_labels(**{pod_label: name}),
                           f"the pods of {run['kind']} {name} talk to each other")
    policy["metadata"]["labels"] = {pod_label: name}
    _owned_by(policy, run)
    return policy


def _owned_by(policy: dict, run: dict) -> None:
    uid = run["metadata"].get("uid")
    if uid:
        policy["metadata"]["ownerReferences"] = [{"apiVersion": run["apiVersion"], "kind": run["kind"],
                                                  "name": run["metadata"]["name"], "uid": uid}]


def nccl_group_peers_policy(nodegroup: str, namespace: str = TRAINING_NAMESPACE) -> dict:
    """The pods of a node group's NCCL sweep (ops/nccl.py `pinned` labels each pair's launcher and
    workers with the group) talk to each other. One policy per group, deployed with the charts:
    the pairs' MPIJobs are named at run time, and the validation runner may not create policies.
    A round's pairs run at once, so a pair can reach another pair of its own sweep, nothing else."""
    return _peers_policy(nccl_sweep_peers_policy_name(nodegroup), namespace,
                         match_labels(**{NCCL_GROUP_LABEL: nodegroup}),
                         f"the launchers and workers of node group {nodegroup}'s NCCL sweep talk to each other")
