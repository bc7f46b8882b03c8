"""Every option combination the config accepts, rendered (cdk8s charts, no `cdk synth`):
trainingApi {v1, v2} x queueing {none, kueue} x efaAllocation {devicePlugin, dra, mixed} and p5 with
gpuAllocation dra too (aligned). Each gets the add-ons it needs and no others; a queued one gets
Kueue's quota per flavor as maxSize x what a run pod of the group requests, only its run kind's
framework, EFA claims mapped where a group is on DRA and GPU claims where its GPUs are, and runs labelled with the LocalQueue (unqueued runs carry no Kueue label at all). Plus the
kueue-system NetworkPolicies, connection by connection."""

from __future__ import annotations

import copy
import dataclasses
import ipaddress
import itertools

import kubernetes_validate
import pytest
import yaml

from config import load_environment
from config.kubernetes import EFA_RESOURCE, GPU_RESOURCE, HUGEPAGES_RESOURCE, TRAINING_NAMESPACE
from config.queueing import RUN_FRAMEWORK
from k8s.pods.kueue_queues import COVERED
from k8s_walk import build, closed, objects, raw_environments

APIS, QUEUEING = ("v1", "v2"), ("none", "kueue")
# group -> efaAllocation, or (efaAllocation, gpuAllocation); "aligned": p5's GPUs and EFA both through DRA.
LAYOUTS = {"devicePlugin": {}, "dra": {"p4d": "dra", "p5": "dra"}, "mixed": {"p5": "dra"},
           "aligned": {"p5": ("dra", "dra")}}
COMBINATIONS = list(itertools.product(APIS, QUEUEING, LAYOUTS))
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Every environment of dev's shape gets these, whatever its options.
ALWAYS = {"namespaces", "priority-classes", "network-policies", "etcd", "fsx-storage", "runner-rbac",
          "nvidia-device-plugin", "data-preparation", "training-operator-crds", "training-operator"}


def environment(api: str, queueing: str, layout: str):
    raw = copy.deepcopy(raw_environments()["dev"])
    for group in raw["gpuNodegroups"]:
        if group["name"] in LAYOUTS[layout]:
            efa, gpu = (LAYOUTS[layout][group["name"]], None) if isinstance(LAYOUTS[layout][group["name"]], str) \
                else LAYOUTS[layout][group["name"]]
            group["efaAllocation"] = efa
            if gpu:
                group["gpuAllocation"] = gpu
    raw.update(trainingApi=api, queueing=queueing)
    return load_environment({"dev": raw}, "dev")


def expected_addons(api: str, queueing: str, layout: str) -> set[str]:
    names = set(ALWAYS)
    names |= {"efa-device-plugin"} if layout != "dra" else set()
    names |= {"aws-dranet"} if layout != "devicePlugin" else set()
    names |= {"nvidia-dra-driver"} if layout == "aligned" else set()
    names |= {"jobset-crd", "jobset", "trainer-v2-crds", "trainer-v2"} if api == "v2" else set()
    names |= {"kueue-crds", "kueue", "kueue-queues"} if queueing == "kueue" else set()
    return names


@pytest.fixture(scope="module")
def rendered():
    """(api, queueing, layout) -> (config, chart name -> objects)."""
    out = {}
    for combination in COMBINATIONS:
        config = environment(*combination)
        charts = build(config)
        out[combination] = (config, {name: docs for name, docs in charts.manifests().items()})
    return out


@pytest.mark.parametrize("api, queueing, layout", COMBINATIONS)
def test_each_combination_gets_the_add_ons_it_needs_and_no_others(rendered, api, queueing, layout):
    _, charts = rendered[(api, queueing, layout)]
    assert set(charts) == expected_addons(api, queueing, layout)


def _run_pod_requests(config, group) -> dict:
    """What one run pod of `group` requests, GPUs and EFA counted through its claim on a DRA group
    by the device classes Kueue's deviceClassMappings name."""
    from k8s.pods.devices import claim_template
    from k8s.pods.pytorchjob import render_run

    preset = {"cpu": "cpu-ddp", "p5": "llama3-8b-fsdp", "p4d": "llama2-7b-fsdp"}[group.name]
    job = render_run(config, preset, image="registry.example/trainer:1")
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    # Kueue refuses a workload requesting a resource its ClusterQueue does not cover (BlockUndeclared).
    for container in pod["containers"] + pod.get("initContainers", []):
        for side in ("requests", "limits"):
            assert set(container["resources"].get(side, {})) <= set(COVERED), (group.name, container["name"])
    [container] = pod["containers"]
    requests = dict(container["resources"]["requests"])
    if group.efa_path == "dra":
        by_class = {"efa.networking.k8s.aws": EFA_RESOURCE, "gpu.nvidia.com": GPU_RESOURCE}
        claimed: dict[str, int] = {}
        for request in claim_template(group)["spec"]["spec"]["devices"]["requests"]:
            resource = by_class[request["exactly"]["deviceClassName"]]
            claimed[resource] = claimed.get(resource, 0) + request["exactly"]["count"]
        # A device is either claimed or requested, never both (Kueue would count it twice).
        assert not set(claimed) & set(requests), group.name
        requests.update({r: str(n) for r, n in claimed.items()})
    return requests


def _quantity(text: str) -> int:
    """Integers and Mi/Gi, the units our quotas and requests use, in the smallest unit."""
    for suffix, factor in (("Gi", 1024), ("Mi", 1)):
        if text.endswith(suffix):
            return int(text.removesuffix(suffix)) * factor
    return int(text)


@pytest.mark.parametrize("api, layout", list(itertools.product(APIS, LAYOUTS)))
def test_each_flavors_quota_is_max_size_times_what_a_run_pod_of_its_group_requests(rendered, api, layout):
    config, charts = rendered[(api, "kueue", layout)]
    [queue] = [o for o in charts["kueue-queues"] if o["kind"] == "ClusterQueue"]
    [group_spec] = queue["spec"]["resourceGroups"]
    covered = group_spec["coveredResources"]
    assert covered == ["cpu", "memory", GPU_RESOURCE, EFA_RESOURCE, HUGEPAGES_RESOURCE]
    flavors = {f["name"]: f["resources"] for f in group_spec["flavors"]}
    assert sorted(flavors) == sorted(g.name for g in config.training_nodegroups)
    for group in config.training_nodegroups:
        quota = {r["name"]: r["nominalQuota"] for r in flavors[group.name]}
        assert list(quota) == covered, "each flavor lists its resources in coveredResources order (Kueue's CEL rule)"
        requests = _run_pod_requests(config, group)
        memory = requests["memory"] if requests["memory"].endswith(("Mi", "Gi")) else requests["memory"] + "Mi"
        expected = {"cpu": group.max_size * int(requests["cpu"]), "memory": group.max_size * _quantity(memory),
                    GPU_RESOURCE: group.max_size * int(requests.get(GPU_RESOURCE, 0)),
                    EFA_RESOURCE: group.max_size * int(requests.get(EFA_RESOURCE, 0)),
                    HUGEPAGES_RESOURCE: group.max_size * _quantity(requests.get(HUGEPAGES_RESOURCE, "0Mi"))}
        assert {k: _quantity(v) for k, v in quota.items()} == expected, group.name
    # By hand, for dev's p5 (2 nodes of 8 GPUs and 32 EFA interfaces): the arithmetic itself.
    p5 = {r["name"]: r["nominalQuota"] for r in flavors["p5"]}
    assert (p5[GPU_RESOURCE], p5[EFA_RESOURCE], p5[HUGEPAGES_RESOURCE]) == ("16", "64", "10240Mi")


@pytest.mark.parametrize("api, layout", list(itertools.product(APIS, LAYOUTS)))
def test_kueue_queues_exactly_the_run_kind_of_the_training_api_and_maps_claims_only_with_dra(rendered, api, layout):
    _, charts = rendered[(api, "kueue", layout)]
    [config_map] = [o for o in charts["kueue"] if o["kind"] == "ConfigMap"]
    settings = yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
    assert settings["integrations"]["frameworks"] == [RUN_FRAMEWORK[api]]
    assert ("resources" in settings) is (layout != "devicePlugin")
    mapped = {m["name"]: m["deviceClassNames"] for m in settings.get("resources", {}).get("deviceClassMappings", [])}
    expected = {} if layout == "devicePlugin" else {EFA_RESOURCE: ["efa.networking.k8s.aws"]}
    if layout == "aligned":  # the GPU claims count against the same nvidia.com/gpu quota as plugin GPUs
        expected[GPU_RESOURCE] = ["gpu.nvidia.com"]
    assert mapped == expected
    hooks = {h["name"] for o in charts["kueue"] if o["kind"].endswith("WebhookConfiguration") for h in o["webhooks"]}
    run_hooks = {h for h in hooks if h.removeprefix("m").removeprefix("v") in ("trainjob.kb.io", "pytorchjob.kb.io")}
    kind = "trainjob" if api == "v2" else "pytorchjob"
    assert run_hooks == {f"m{kind}.kb.io", f"v{kind}.kb.io"}


@pytest.mark.parametrize("api, queueing", list(itertools.product(APIS, QUEUEING)))
def test_runs_carry_the_local_queue_label_exactly_when_queued(dev, api, queueing):
    from k8s.pods.pytorchjob import render_run
    from k8s.pods.trainjob import render_trainjob_run

    config = dataclasses.replace(dev, training_api=api, queueing=queueing)
    image = "registry.example/trainer:1"
    runs = ([render_run(config, "cpu-ddp", image=image)] if api == "v1"
            else [render_trainjob_run(config, "cpu-ddp", image=image)[1]])
    for run in runs:
        labels = run["metadata"]["labels"]
        if queueing == "kueue":
            assert labels[QUEUE_LABEL] == "default"
        else:
            assert not [k for k in labels if k.startswith("kueue.x-k8s.io/")]


@pytest.mark.parametrize("api", APIS)
def test_an_unqueued_run_renders_as_if_kueue_did_not_exist(dev, api):
    """Queueing adds the label and, on a TrainJob, leaves spec.suspend to Kueue's webhook (which
    suspends it until admitted), nothing else: a queued run is the unqueued one (its name and digest
    aside, which cover the label)."""
    from k8s.pods.pytorchjob import render_run
    from k8s.pods.trainjob import render_trainjob_run

    def run(queueing: str) -> dict:
        config = dataclasses.replace(dev, training_api=api, queueing=queueing)
        made = (render_run(config, "cpu-ddp", image="r/t:1", job_name="x") if api == "v1"
                else render_trainjob_run(config, "cpu-ddp", image="r/t:1", job_name="x")[1])
        made["metadata"]["labels"].pop("eks-distributed-training.io/spec-digest", None)
        return made

    queued, plain = run("kueue"), run("none")
    del queued["metadata"]["labels"][QUEUE_LABEL]
    if api == "v1":  # the rendezvous id hashes the whole job, label included
        for job in (queued, plain):
            job["spec"]["elasticPolicy"].pop("rdzvId")
    else:
        assert "suspend" not in queued["spec"] and plain["spec"].pop("suspend") is False
    assert queued == plain


@pytest.mark.parametrize("api", APIS)
def test_the_kueue_charts_are_strict_valid_and_their_custom_objects_fit_our_crds(rendered, api):
    from k8s.addons.kueue_crds import kueue_crds

    config, charts = rendered[(api, "kueue", "mixed")]
    schemas = {c["spec"]["names"]["kind"]: c["spec"]["versions"][0]["schema"]["openAPIV3Schema"] for c in kueue_crds()}
    checked = 0
    for name in ("kueue-crds", "kueue", "kueue-queues"):
        for obj in charts[name]:
            if obj["apiVersion"].startswith("kueue.x-k8s.io/"):
                import jsonschema

                jsonschema.validate(obj, closed(schemas[obj["kind"]]))
            else:
                kubernetes_validate.validate(obj, config.kubernetes_version, strict=True)
            checked += 1
    assert checked > 30


def test_the_kueue_objects_live_in_namespaces_that_exist(rendered):
    _, charts = rendered[("v2", "kueue", "mixed")]
    created = {o["metadata"]["name"] for docs in charts.values() for o in docs if o["kind"] == "Namespace"}
    for name in ("kueue", "kueue-queues"):
        for obj in charts[name]:
            namespace = obj["metadata"].get("namespace")
            assert namespace in created | {"kube-system", None}, (obj["kind"], obj["metadata"]["name"])


# --- kueue-system's NetworkPolicies -------------------------------------------------------------

KUEUE_TABLE = [
    ("addr:api-eni", 9443, True, "the API server calls the admission and conversion webhooks"),
    ("addr:api-eni", 8082, True, "the aggregator calls the visibility API (ops status's queue positions)"),
    ("addr:api-eni", 8443, False, "metrics: nothing scrapes them"),
    ("addr:s3", 9443, False, "the webhooks only from the VPC"),
    ("out:api-service", 443, True, "the manager reconciles through the API server"),
    ("out:api-eni", 443, True, "the manager reaches the API server's own addresses"),
    ("out:hub", 443, False, "no internet"),
    ("training-pod", 9443, False, "runs never call Kueue directly (the training namespace's egress is denied; "
                                  "Kueue's ingress is the VPC range, as the API server's ENIs share it)"),
]


@pytest.fixture(scope="module")
def kueue_world(dev):
    from network_policy_eval import Address, Cluster, Pod

    from k8s.addons.kueue import kueue_controller
    from k8s.pods.network_policy import training_policies

    config = dataclasses.replace(dev, queueing="kueue", training_api="v2")
    docs = kueue_controller(config)
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    hosts = ipaddress.ip_network(config.vpc_cidr).hosts()
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    manager = Pod("kueue", "kueue-system", str(next(hosts)), deployment["spec"]["template"]["metadata"]["labels"])
    trainee = Pod("training-pod", TRAINING_NAMESPACE, str(next(hosts)), {"app": "run"})
    addresses = {"api-service": Address("the kubernetes Service", "172.20.0.1"),
                 "api-eni": Address("the API server's ENI", str(next(hosts))),
                 "s3": Address("S3", "52.92.16.10"), "hub": Address("the Hugging Face hub", "18.160.10.20")}
    cluster = Cluster(policies + training_policies(config.vpc_cidr), {"kueue-system": {}, TRAINING_NAMESPACE: {}}, [], [manager, trainee])
    return cluster, manager, {"training-pod": trainee, **{f"addr:{k}": v for k, v in addresses.items()}}, addresses


@pytest.mark.parametrize("peer, port, expected, why", KUEUE_TABLE, ids=[f"{p}:{n}" for p, n, _, _ in KUEUE_TABLE])
def test_kueue_system_connection(kueue_world, peer, port, expected, why):
    cluster, manager, peers, addresses = kueue_world
    if peer.startswith("out:"):
        allowed = cluster.allowed(manager, addresses[peer.removeprefix("out:")], port, "TCP")
    else:
        allowed = cluster.allowed(peers[peer], manager, port, "TCP")
    assert allowed is expected, why


def test_kueue_system_denies_everything_by_default(kueue_world):
    deny = [p for p in kueue_world[0].policies if p["metadata"]["namespace"] != TRAINING_NAMESPACE
            and p["spec"]["podSelector"] == {}
            and not p["spec"].get("ingress") and not p["spec"].get("egress")]
    assert [p["metadata"]["namespace"] for p in deny] == ["kueue-system"]
    assert sorted(deny[0]["spec"]["policyTypes"]) == ["Egress", "Ingress"]
