"""The NetworkPolicies we render, evaluated: a table of (from, to, port) -> allowed or denied.

The world is dev as deployed and run: every chart's objects; everything `ops` creates
(k8s_walk.ops_objects: each preset's run as `ops start` names it, the validation's GPU checks,
smoke run and NCCL sweep pairs, the data and model-download Jobs) and two runs `ops submit --name`
creates, one with etcd rendezvous and one with c10d, each run with the peers policy `ops start` and
`ops submit` create beside it; a second pair of one sweep; a run an earlier release deployed under
its preset's name; the pods the operator makes of the jobs, the Services pods reach by ClusterIP,
and addresses outside the cluster. tests/k8s/network_policy_eval.py judges each connection as the
Amazon VPC CNI would. README "Security" shows the same table.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import itertools

import pytest

from config.kubernetes import NCCL_GROUP_LABEL, TRAINING_NAMESPACE, VALIDATION_LABEL
from k8s.pods.names import ETCD_CLIENT_LABEL, KUBE_SYSTEM_NAMESPACE, KUBEFLOW_NAMESPACE
from k8s.pods.pytorchjob import render_pytorchjob, render_run
from k8s.pods.network_policy import job_peers_policy
from k8s_walk import build, objects
from network_policy_eval import Address, Cluster, Pod, Service, selects
from ops import nccl
from rendered import ops_objects, pods

STRANGER_NAMESPACE = "default"


def _gets_a_peers_policy_from_ops(obj: dict) -> bool:
    """The runs `ops start`/`ops submit` create, which create the peers policy too; not validation's
    smoke run, which `ops validate` creates with kubectl (its policy is the chart's)."""
    return obj["kind"] == "PyTorchJob" and not obj["metadata"].get("labels", {}).get(VALIDATION_LABEL)


@pytest.fixture(scope="module")
def world(dev):
    chart_objects = objects(build(dev))
    submitted = [render_run(dev, "llm-tiny", image="i", job_name="run-a", overrides={"rendezvous": "etcd"}),
                 render_run(dev, "cpu-ddp", image="i", job_name="run-b", overrides={"rendezvous": "c10d"})]
    everything = ops_objects(dev)
    # ops validate creates the pinned pairs of an NCCL template, never the template itself.
    by_ops = [o for o in everything if o["kind"] != "MPIJob" or NCCL_GROUP_LABEL in o["metadata"].get("labels", {})]
    p5_template = next(o for o in everything if o["kind"] == "MPIJob" and o["metadata"]["name"] == "nccl-allreduce-p5")
    second_pair = nccl.pinned(p5_template, ("p5-node-c", "p5-node-d"), 1, "p5")
    legacy = render_pytorchjob(dev, "cpu-ddp", image="i")  # what an earlier release deployed, named cpu-ddp
    made = chart_objects + submitted + by_ops + [second_pair, legacy]
    policies = [o for o in made if o["kind"] == "NetworkPolicy"]
    policies += [job_peers_policy(r) for r in submitted + by_ops if _gets_a_peers_policy_from_ops(r)]
    hosts = ipaddress.ip_network(dev.vpc_cidr).hosts()
    found: dict[str, Pod] = {}
    for obj in made:
        for pod in pods(obj):
            found[pod.where] = Pod(pod.where, pod.namespace, str(next(hosts)), pod.labels)
    found["stranger"] = Pod("stranger", STRANGER_NAMESPACE, str(next(hosts)), {"app": "anything"})
    found["kube-dns"] = Pod("kube-dns", KUBE_SYSTEM_NAMESPACE, str(next(hosts)), {"k8s-app": "kube-dns"})
    etcd_service = next(o for o in chart_objects if o["kind"] == "Service" and o["metadata"]["name"] == "etcd")
    services = {
        "etcd": Service("etcd", TRAINING_NAMESPACE, "172.20.14.2", etcd_service["spec"]["selector"],
                        {p["port"]: p["targetPort"] for p in etcd_service["spec"]["ports"]}),
        "kube-dns": Service("kube-dns", KUBE_SYSTEM_NAMESPACE, "172.20.0.10", {"k8s-app": "kube-dns"}, {53: 53}),
    }
    addresses = {
        "api-service": Address("the kubernetes Service", "172.20.0.1"),
        "api-service-10.100": Address("the kubernetes Service (10.100.0.0/16 range)", "10.100.0.1"),
        "api-eni": Address("the API server's ENI in the VPC", str(next(hosts))),
        "fsx": Address("the FSx file system's ENI", str(next(hosts))),
        "s3": Address("S3", "52.92.16.10"),
        "hub": Address("the Hugging Face hub", "18.160.10.20"),
        "pod-identity": Address("the Pod Identity agent", "169.254.170.23"),
        "imds": Address("the instance metadata service", "169.254.169.254"),
        "kubelet": Address("a node's kubelet", str(next(hosts))),
        "service-range": Address("another Service's ClusterIP (a webhook's, on 443)", "172.20.77.7"),
    }
    namespaces = {o["metadata"]["name"]: o["metadata"].get("labels", {}) for o in chart_objects if o["kind"] == "Namespace"}
    namespaces |= {KUBE_SYSTEM_NAMESPACE: {}, STRANGER_NAMESPACE: {}}
    cluster = Cluster(policies, namespaces, list(services.values()), list(found.values()))
    return cluster, found, services, addresses


def _pick(found: dict, fragment: str) -> Pod:
    """The first pod whose place contains `fragment` (`*` matches any run of characters)."""
    matches = [p for where, p in found.items() if fnmatch.fnmatchcase(where, f"*{fragment}*")]
    assert matches, f"no pod matching {fragment!r}: {sorted(found)}"
    return matches[0]


# (from, to, port, protocol, allowed, why). Pods are named by a fragment of where they come from
# (`*` for a run's digest).
TABLE = [
    ("PyTorchJob/run-a/Worker/0", "PyTorchJob/run-a/Worker/1", 29400, "TCP", True, "c10d store inside one job"),
    ("PyTorchJob/run-a/Worker/1", "PyTorchJob/run-a/Worker/0", 41234, "TCP", True, "gloo/NCCL bootstrap, ephemeral"),
    ("PyTorchJob/run-a/Worker/0", "PyTorchJob/run-b/Worker/0", 29400, "TCP", False, "another job"),
    ("PyTorchJob/run-b/Worker/0", "PyTorchJob/run-a/Worker/0", 41234, "TCP", False, "another job"),
    ("PyTorchJob/run-a/Worker/0", "PyTorchJob/run-a/Worker/1", 5353, "UDP", False, "only TCP between workers"),
    ("PyTorchJob/cpu-ddp-*/Worker/0", "PyTorchJob/cpu-ddp-*/Worker/1", 29400, "TCP", True,
     "a run `ops start` created (PRESET-<digest>): its peers policy"),
    ("PyTorchJob/llama3-8b-fsdp-*/Worker/1", "PyTorchJob/llama3-8b-fsdp-*/Worker/0", 41234, "TCP", True,
     "a GPU run `ops start` created: NCCL bootstrap"),
    ("PyTorchJob/cpu-ddp-*/Worker/0", "PyTorchJob/vision-tiny-*/Worker/0", 29400, "TCP", False, "another run"),
    ("PyTorchJob/cpu-ddp/Worker/0", "PyTorchJob/cpu-ddp/Worker/1", 23456, "TCP", True,
     "a run an earlier release deployed under its preset's name keeps its peers"),
    ("PyTorchJob/cpu-ddp/Worker/0", "PyTorchJob/cpu-ddp-*/Worker/0", 23456, "TCP", False, "another run of the preset"),
    ("PyTorchJob/validation-cpu-ddp/Worker/0", "PyTorchJob/validation-cpu-ddp/Worker/1", 29400, "TCP", True,
     "the smoke run: the chart's fixed-name peers policy"),
    ("PyTorchJob/validation-cpu-ddp/Worker/0", "PyTorchJob/cpu-ddp-*/Worker/0", 29400, "TCP", False, "a user's run"),
    ("PyTorchJob/cpu-ddp-*/Worker/0", "PyTorchJob/validation-cpu-ddp/Worker/0", 29400, "TCP", False, "the smoke run"),
    ("PyTorchJob/run-a/Worker/0", "svc:etcd", 2379, "TCP", True, "etcd rendezvous client"),
    ("PyTorchJob/run-b/Worker/0", "svc:etcd", 2379, "TCP", False, "c10d job: no etcd label"),
    ("PyTorchJob/run-a/Worker/0", "Deployment/etcd", 2380, "TCP", False, "etcd's peer port"),
    ("stranger", "svc:etcd", 2379, "TCP", False, "a pod of another namespace"),
    ("PyTorchJob/run-a/Worker/0", "svc:kube-dns", 53, "UDP", True, "DNS"),
    ("Job/gpu-check-p5", "svc:kube-dns", 53, "TCP", True, "DNS"),
    ("PyTorchJob/run-a/Worker/0", "addr:s3", 443, "TCP", False, "training pods have no internet"),
    ("PyTorchJob/run-a/Worker/0", "addr:hub", 443, "TCP", False, "--init-from-hf reads FSx, not the hub"),
    ("PyTorchJob/run-a/Worker/0", "addr:pod-identity", 80, "TCP", False, "no AWS credentials"),
    ("PyTorchJob/run-a/Worker/0", "addr:imds", 80, "TCP", False, "no instance metadata"),
    ("PyTorchJob/run-a/Worker/0", "addr:api-service", 443, "TCP", False, "workers never call the API"),
    ("PyTorchJob/run-a/Worker/0", "addr:kubelet", 10250, "TCP", False, "no kubelet API"),
    ("PyTorchJob/run-a/Worker/0", "addr:fsx", 988, "TCP", False, "Lustre traffic leaves from the node"),
    ("PyTorchJob/run-a/Worker/0", "Deployment/training-operator", 9443, "TCP", False, "egress is closed"),
    ("stranger", "PyTorchJob/run-a/Worker/0", 29400, "TCP", False, "nobody outside the job"),
    ("Job/data-imagenet", "PyTorchJob/run-a/Worker/0", 29400, "TCP", False, "nobody outside the job"),
    ("MPIJob/nccl-allreduce-p5-0/Launcher/0", "MPIJob/nccl-allreduce-p5-0/Worker/0", 41000, "TCP", True,
     "mpirun's daemons (the sweep's policy of group p5)"),
    ("MPIJob/nccl-allreduce-p5-0/Worker/1", "MPIJob/nccl-allreduce-p5-0/Worker/0", 41000, "TCP", True, "NCCL bootstrap"),
    ("MPIJob/nccl-allreduce-p5-0/Worker/0", "MPIJob/nccl-allreduce-p5-0/Launcher/0", 41001, "TCP", True,
     "orted calls back"),
    ("MPIJob/nccl-allreduce-p5-1/Worker/0", "MPIJob/nccl-allreduce-p5-0/Worker/0", 41000, "TCP", True,
     "one policy per sweep: a round's pairs run at once and may reach each other"),
    ("MPIJob/nccl-allreduce-p5-0/Launcher/0", "MPIJob/nccl-allreduce-p4d-0/Worker/0", 41000, "TCP", False,
     "another group's sweep"),
    ("MPIJob/nccl-allreduce-p4d-0/Worker/0", "MPIJob/nccl-allreduce-p5-0/Worker/0", 41000, "TCP", False,
     "another group's sweep"),
    ("MPIJob/nccl-allreduce-p5-0/Worker/0", "PyTorchJob/llama3-8b-fsdp-*/Worker/0", 41000, "TCP", False, "a run"),
    ("PyTorchJob/llama3-8b-fsdp-*/Worker/0", "MPIJob/nccl-allreduce-p5-0/Worker/0", 41000, "TCP", False, "a run"),
    ("MPIJob/nccl-allreduce-p5-0/Launcher/0", "addr:api-service", 443, "TCP", True, "kubectl exec"),
    ("MPIJob/nccl-allreduce-p5-0/Launcher/0", "addr:api-service-10.100", 443, "TCP", True, "kubectl exec"),
    ("MPIJob/nccl-allreduce-p5-0/Launcher/0", "addr:s3", 443, "TCP", False, "the API server only"),
    ("MPIJob/nccl-allreduce-p5-0/Worker/0", "addr:api-service", 443, "TCP", False, "workers never call the API"),
    ("MPIJob/nccl-allreduce-p5-0/Worker/0", "svc:etcd", 2379, "TCP", False, "MPI uses no rendezvous"),
    ("Job/data-imagenet", "addr:s3", 443, "TCP", True, "copies from S3"),
    ("Job/data-imagenet", "addr:pod-identity", 80, "TCP", True, "its Pod Identity credentials"),
    ("Job/data-imagenet", "addr:imds", 80, "TCP", False, "not the node's credentials"),
    ("Job/data-imagenet", "addr:s3", 80, "TCP", False, "HTTPS only"),
    ("Job/data-imagenet", "addr:api-eni", 443, "TCP", False, "nothing in the VPC"),
    ("Job/data-imagenet", "svc:etcd", 2379, "TCP", False, "not a rendezvous client"),
    ("Job/data-imagenet", "addr:api-service", 443, "TCP", False, "the API server by its Service address either"),
    ("Job/data-imagenet", "addr:api-service-10.100", 443, "TCP", False, "the API server by its Service address either"),
    ("Job/data-imagenet", "addr:service-range", 443, "TCP", False, "no Service of the cluster"),
    ("Job/data-imagenet", "addr:kubelet", 10250, "TCP", False, "no kubelet API"),
    ("Job/model-download-", "addr:hub", 443, "TCP", True, "downloads from the hub"),
    ("Job/model-download-", "addr:pod-identity", 80, "TCP", False, "no AWS role"),
    ("Job/model-download-", "addr:imds", 80, "TCP", False, "not the node's credentials"),
    ("Job/model-download-", "addr:api-service", 443, "TCP", False, "the API server by its Service address either"),
    ("Job/model-download-", "addr:service-range", 443, "TCP", False, "no Service of the cluster"),
    ("Job/model-download-", "PyTorchJob/run-a/Worker/0", 29400, "TCP", False, "nothing in the VPC"),
    ("Job/gpu-check-p5", "addr:hub", 443, "TCP", False, "the GPU check reaches nothing"),
    ("addr:api-eni", "Deployment/training-operator", 9443, "TCP", True, "the API server calls the webhook"),
    ("addr:s3", "Deployment/training-operator", 9443, "TCP", False, "the webhook only from the VPC"),
    ("stranger", "Deployment/training-operator", 9443, "TCP", True,
     "pods share the subnets of the API server's ENIs, so the webhook's TLS port is open to them"),
    ("addr:api-eni", "Deployment/training-operator", 8080, "TCP", False, "metrics: nothing scrapes them"),
    ("stranger", "Deployment/training-operator", 8080, "TCP", False, "metrics: nothing scrapes them"),
    ("stranger", "Deployment/training-operator", 8081, "TCP", False, "probes come from the node only"),
    ("Deployment/training-operator", "addr:api-service", 443, "TCP", True, "the operator reconciles jobs"),
    ("Deployment/training-operator", "addr:api-eni", 443, "TCP", True, "the endpoint's own addresses"),
    ("Deployment/training-operator", "addr:hub", 443, "TCP", False, "no internet"),
    ("Deployment/training-operator", "PyTorchJob/run-a/Worker/0", 29400, "TCP", False, "it talks to the API only"),
    ("stranger", "PyTorchJob/run-a/Worker/0", 22, "TCP", False, "default deny"),
]


def _endpoint(world, name: str):
    _, found, services, addresses = world
    if name.startswith("svc:"):
        return services[name[4:]]
    if name.startswith("addr:"):
        return addresses[name[5:]]
    return _pick(found, name)


@pytest.mark.parametrize("src,dst,port,protocol,expected,why", TABLE,
                         ids=[f"{s}->{d}:{p}/{proto}" for s, d, p, proto, _, _ in TABLE])
def test_connection(world, src, dst, port, protocol, expected, why):
    cluster = world[0]
    assert cluster.allowed(_endpoint(world, src), _endpoint(world, dst), port, protocol) is expected, why


@pytest.mark.parametrize("namespace", [KUBEFLOW_NAMESPACE, TRAINING_NAMESPACE])
def test_every_namespace_we_create_denies_everything_by_default(world, namespace):
    cluster = world[0]
    deny = [p for p in cluster.policies if p["metadata"]["namespace"] == namespace and p["spec"]["podSelector"] == {}
            and set(p["spec"]["policyTypes"]) == {"Ingress", "Egress"} and not p["spec"].get("ingress")
            and not p["spec"].get("egress")]
    assert len(deny) == 1


def test_the_pods_of_every_job_deployed_or_created_by_ops_reach_each_other(world):
    """Every PyTorchJob and MPIJob pod in the world (the runs of ops start and submit, the smoke
    run, the sweep's pairs, an earlier release's run) reaches every other pod of its job: a job
    without a peers policy would hang in its rendezvous under the default deny."""
    cluster, found, _, _ = world
    jobs: dict[str, list[Pod]] = {}
    for where, pod in found.items():
        if where.startswith(("PyTorchJob/", "MPIJob/")):
            jobs.setdefault(where.split("/")[1], []).append(pod)
    many = {job for job, members in jobs.items() if len(members) > 1}
    assert {"validation-cpu-ddp", "nccl-allreduce-p5-0", "nccl-allreduce-p4d-0", "cpu-ddp", "run-a"} <= many
    for job in many:
        for a, b in itertools.permutations(jobs[job], 2):
            assert cluster.allowed(a, b, 40000), f"{job}: {a.name} -> {b.name}"

def test_only_etcd_clients_reach_etcd(world):
    """etcd has no authentication: its only protection is that nothing else reaches it."""
    cluster, found, services, _ = world
    for pod in found.values():
        allowed = cluster.allowed(pod, services["etcd"], 2379)
        assert allowed == (pod.labels.get(ETCD_CLIENT_LABEL) == "true"), pod.name
    clients = [p for p in found.values() if p.labels.get(ETCD_CLIENT_LABEL) == "true"]
    assert clients and all(p.name.startswith("PyTorchJob/") for p in clients)


def test_every_rule_stays_within_the_vpc_cni_port_limit(world):
    """"Limit pod traffic with Kubernetes network policies", Considerations: at most 24 unique port
    combinations per protocol in each ingress or egress selector."""
    for policy in world[0].policies:
        for rule in (policy["spec"].get("ingress") or []) + (policy["spec"].get("egress") or []):
            for protocol, entries in itertools.groupby(sorted((p.get("protocol", "TCP"), str(p)) for p in rule.get("ports") or []),
                                                       key=lambda e: e[0]):
                assert len(list(entries)) <= 24, policy["metadata"]["name"]


def test_services_pods_reach_keep_their_port_as_the_target_port(dev):
    """Same page: "the service port must be the same as the container port" for the VPC CNI."""
    for obj in objects(build(dev)):
        if obj["kind"] == "Service" and obj["metadata"]["namespace"] == TRAINING_NAMESPACE:
            for port in obj["spec"]["ports"]:
                assert port.get("targetPort", port["port"]) == port["port"], obj["metadata"]["name"]


def test_the_evaluator_follows_the_api_semantics():
    a = Pod("a", "ns", "10.0.0.1", {"app": "a"}, {"http": ("TCP", 8080)})
    b = Pod("b", "ns", "10.0.0.2", {"app": "b"})
    c = Pod("c", "other", "10.0.0.3", {"app": "b"})
    ingress_only = {"metadata": {"namespace": "ns"}, "spec": {"podSelector": {"matchLabels": {"app": "a"}}, "ingress": [
        {"from": [{"namespaceSelector": {"matchLabels": {"team": "x"}}, "podSelector": {"matchLabels": {"app": "b"}}}],
         "ports": [{"port": "http"}]}]}}
    cluster = Cluster([ingress_only], {"ns": {}, "other": {"team": "x"}}, pods=[a, b, c])
    assert cluster.allowed(c, a, 8080) and not cluster.allowed(b, a, 8080)  # both selectors: AND
    assert not cluster.allowed(c, a, 9090)  # the named port resolves to 8080 only
    assert cluster.allowed(a, b, 1)  # no policy selects b, and a's egress is not isolated (no Egress type)
    block = {"metadata": {"namespace": "ns"}, "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [
        {"to": [{"ipBlock": {"cidr": "10.0.0.0/24", "except": ["10.0.0.3/32"]}}], "ports": [{"port": 1, "endPort": 5}]}]}}
    cluster = Cluster([block], {"ns": {}, "other": {}}, pods=[a, b, c])
    assert cluster.allowed(a, b, 5) and not cluster.allowed(a, b, 6) and not cluster.allowed(a, c, 3)
    assert selects({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["a"]}]}, {"app": "b"})


V2_TABLE = [
    ("addr:api-eni", "kubeflow-trainer-controller-manager", 9443, True, "the API server calls Trainer's webhooks"),
    ("addr:api-eni", "jobset-controller-manager", 9443, True, "the API server calls JobSet's webhooks"),
    ("addr:s3", "jobset-controller-manager", 9443, False, "the webhooks only from the VPC"),
    ("addr:api-eni", "kubeflow-trainer-controller-manager", 10443, False, "the status server: no run of ours calls it"),
    ("addr:api-eni", "jobset-controller-manager", 8443, False, "metrics: nothing scrapes them"),
    ("kubeflow-trainer-controller-manager", "addr:api-service", 443, True, "Trainer reconciles TrainJobs"),
    ("jobset-controller-manager", "addr:api-eni", 443, True, "JobSet reconciles JobSets"),
    ("jobset-controller-manager", "addr:hub", 443, False, "no internet"),
    ("kubeflow-trainer-controller-manager", "jobset-controller-manager", 9443, False,
     "Trainer creates JobSets through the API server, never directly"),
]


@pytest.fixture(scope="module")
def v2_world(dev):
    """kubeflow-system of a trainingApi v2 environment: its policies, the two controllers' pods."""
    import dataclasses

    from k8s.addons.jobset import jobset_controller
    from k8s.addons.network_policies import network_policies
    from k8s.addons.trainer_v2 import trainer_controller

    v2 = dataclasses.replace(dev, training_api="v2")
    policies = network_policies(v2)
    hosts = ipaddress.ip_network(v2.vpc_cidr).hosts()
    found = {}
    for obj in jobset_controller() + trainer_controller():
        if obj["kind"] == "Deployment":
            labels = obj["spec"]["template"]["metadata"]["labels"]
            found[obj["metadata"]["name"]] = Pod(obj["metadata"]["name"], obj["metadata"]["namespace"],
                                                 str(next(hosts)), labels)
    addresses = {"api-service": Address("the kubernetes Service", "172.20.0.1"),
                 "api-eni": Address("the API server's ENI", str(next(hosts))),
                 "s3": Address("S3", "52.92.16.10"), "hub": Address("the Hugging Face hub", "18.160.10.20")}
    cluster = Cluster(policies, {"kubeflow-system": {}, KUBEFLOW_NAMESPACE: {}, TRAINING_NAMESPACE: {}}, [],
                      list(found.values()))
    return cluster, {**found, **{f"addr:{k}": v for k, v in addresses.items()}}


@pytest.mark.parametrize("src,dst,port,expected,why", V2_TABLE, ids=[f"{s}->{d}:{p}" for s, d, p, _, _ in V2_TABLE])
def test_kubeflow_system_connection_under_trainer_v2(v2_world, src, dst, port, expected, why):
    cluster, endpoints = v2_world
    assert cluster.allowed(endpoints[src], endpoints[dst], port, "TCP") is expected, why


def test_kubeflow_system_denies_everything_by_default_under_trainer_v2_and_only_there(dev, v2_world):
    from k8s.addons.network_policies import network_policies

    deny = [p for p in v2_world[0].policies if p["metadata"]["namespace"] == "kubeflow-system"
            and p["spec"]["podSelector"] == {} and not p["spec"].get("ingress") and not p["spec"].get("egress")]
    assert len(deny) == 1
    assert not [p for p in network_policies(dev) if p["metadata"]["namespace"] == "kubeflow-system"]


# --- trainingApi v2: a TrainJob's peers policy (ops/trainjobs.py creates it with the run) ------------

def test_the_trainjob_peers_policy_selects_the_label_jobset_puts_on_every_pod_of_the_run():
    """JobSet v0.12.0 labels each pod with its JobSet's name, which Trainer v2.3.0 gives the TrainJob's
    name; the contract's pod webhooks select exactly the pods carrying that key."""
    import yaml

    from k8s.pods.network_policy import trainjob_peers_policy
    from k8s.pods.trainjob import JOBSET_NAME_LABEL
    from tests.conftest import contract

    for patch in ("mutating", "validating"):
        [op] = yaml.safe_load(contract("jobset-v0.12.0", f"components-webhook-patches-{patch}-patch.yaml").read_text())
        assert op["value"]["rules"][0]["resources"] == ["pods"]
        assert op["value"]["objectSelector"]["matchExpressions"][0]["key"] == JOBSET_NAME_LABEL
    policy = trainjob_peers_policy({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                                    "metadata": {"name": "run-a", "namespace": TRAINING_NAMESPACE, "uid": "u-1"}})
    assert policy["spec"]["podSelector"] == {"matchLabels": {JOBSET_NAME_LABEL: "run-a"}}
    assert policy["metadata"]["ownerReferences"] == [
        {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "run-a", "uid": "u-1"}]


def test_the_pods_of_a_trainjob_reach_each_other_and_etcd_and_no_other_runs(dev):
    import dataclasses

    from k8s.addons.network_policies import network_policies
    from k8s.pods.network_policy import trainjob_peers_policy
    from k8s.pods.trainjob import JOBSET_NAME_LABEL, node_pod_template, render_trainjob_run

    v2 = dataclasses.replace(dev, training_api="v2")
    hosts = ipaddress.ip_network(v2.vpc_cidr).hosts()
    from k8s.addons.etcd import POD_LABELS, clients_only_policy

    policies = [p for p in network_policies(v2) if p["metadata"]["namespace"] == TRAINING_NAMESPACE]
    policies.append(clients_only_policy())
    found = {}
    for name in ("run-a", "run-b"):
        runtime, trainjob = render_trainjob_run(v2, "llm-tiny", image="i", job_name=name,
                                                overrides={"rendezvous": "etcd"})
        policies.append(trainjob_peers_policy(trainjob))
        labels = {**node_pod_template(runtime)["metadata"]["labels"], JOBSET_NAME_LABEL: name}
        for index in (0, 1):
            found[f"{name}/{index}"] = Pod(f"{name}/{index}", TRAINING_NAMESPACE, str(next(hosts)), labels)
    etcd = Pod("etcd", TRAINING_NAMESPACE, str(next(hosts)), dict(POD_LABELS))
    cluster = Cluster(policies, {TRAINING_NAMESPACE: {}}, [], [*found.values(), etcd])
    assert cluster.allowed(found["run-a/0"], found["run-a/1"], 29500, "TCP")
    assert cluster.allowed(found["run-a/1"], found["run-a/0"], 41234, "TCP")
    assert not cluster.allowed(found["run-a/0"], found["run-b/0"], 29500, "TCP")
    assert not cluster.allowed(found["run-b/1"], found["run-a/1"], 41234, "TCP")
    assert cluster.allowed(found["run-a/0"], etcd, 2379, "TCP")


def test_under_trainer_v2_the_charts_smoke_run_policy_selects_the_smoke_trainjobs_pods(dev):
    """`ops validate` creates the smoke run with kubectl and no policy of its own: the chart's
    fixed-name policy must select what JobSet labels the TrainJob's pods with, not the v1 operator's
    label, which no v2 pod carries."""
    import dataclasses

    from k8s.addons.etcd import POD_LABELS, clients_only_policy
    from k8s.addons.network_policies import network_policies
    from k8s.pods.trainjob import JOBSET_NAME_LABEL, node_pod_template, render_trainjob_run
    from k8s.pods.validation import SMOKE_RUN, validation_objects

    v2 = dataclasses.replace(dev, training_api="v2")
    policies = [p for p in network_policies(v2) if p["metadata"]["namespace"] == TRAINING_NAMESPACE]
    [smoke_policy] = [p for p in policies if p["metadata"]["name"] == f"{SMOKE_RUN}-peers"]
    assert smoke_policy["spec"]["podSelector"] == {"matchLabels": {JOBSET_NAME_LABEL: SMOKE_RUN}}
    policies.append(clients_only_policy())
    [runtime] = [o for o in validation_objects(v2) if o["kind"] == "TrainingRuntime"]
    other, _ = render_trainjob_run(v2, "cpu-ddp", image="i", job_name="run-a")
    hosts = ipaddress.ip_network(v2.vpc_cidr).hosts()
    found = {}
    for name, rt in ((SMOKE_RUN, runtime), ("run-a", other)):
        labels = {**node_pod_template(rt)["metadata"]["labels"], JOBSET_NAME_LABEL: name}
        for index in (0, 1):
            found[f"{name}/{index}"] = Pod(f"{name}/{index}", TRAINING_NAMESPACE, str(next(hosts)), labels)
    etcd = Pod("etcd", TRAINING_NAMESPACE, str(next(hosts)), dict(POD_LABELS))
    cluster = Cluster(policies, {TRAINING_NAMESPACE: {}}, [], [*found.values(), etcd])
    assert cluster.allowed(found[f"{SMOKE_RUN}/0"], found[f"{SMOKE_RUN}/1"], 29500, "TCP")
    assert cluster.allowed(found[f"{SMOKE_RUN}/1"], found[f"{SMOKE_RUN}/0"], 41234, "TCP")
    assert cluster.allowed(found[f"{SMOKE_RUN}/0"], etcd, 2379, "TCP")
    assert not cluster.allowed(found[f"{SMOKE_RUN}/0"], found["run-a/0"], 29500, "TCP"), \
        "run-a has no peers policy here: nothing lets the smoke run reach it"
