"""render_pytorchjob: the PyTorchJob the chart deploys and `ops submit` sends."""

import pytest

from config import ConfigError
from config.kubernetes import FSX_CLAIM_NAME, GPU_TAINT_KEY, NODEGROUP_LABEL
from config.presets import PRESETS
from k8s.pods.pytorchjob import presets_for, render_pytorchjob

IMAGE = "111111111111.dkr.ecr.us-west-2.amazonaws.com/trainer:abc123"


def _worker(manifest):
    return manifest["spec"]["pytorchReplicaSpecs"]["Worker"]


def _container(manifest):
    return _worker(manifest)["template"]["spec"]["containers"][0]


def test_llama3_on_p5_requests_every_gpu_and_efa_interface_with_equal_limits(dev):
    m = render_pytorchjob(dev, "llama3-8b-fsdp", image=IMAGE)
    res = _container(m)["resources"]
    for name, count in (("nvidia.com/gpu", "8"), ("vpc.amazonaws.com/efa", "32")):
        assert res["requests"][name] == res["limits"][name] == count
    assert res["requests"]["hugepages-2Mi"] == res["limits"]["hugepages-2Mi"]
    assert m["spec"]["elasticPolicy"]["nProcPerNode"] == 8


def test_efa_variables_only_where_efa_is_requested(dev):
    gpu = {e["name"]: e.get("value") for e in _container(render_pytorchjob(dev, "llama2-7b-fsdp", image=IMAGE))["env"]}
    cpu = {e["name"]: e.get("value") for e in _container(render_pytorchjob(dev, "cpu-ddp", image=IMAGE))["env"]}
    assert gpu["FI_PROVIDER"] == "efa" and gpu["NCCL_NET_PLUGIN"] == "ofi"
    # NCCL errors instead of falling back to sockets when the OFI net cannot start (trainer/nccl_net.py).
    assert gpu["NCCL_NET"] == "Libfabric"
    assert gpu["NCCL_SOCKET_IFNAME"] == "^lo,docker0,pod-id-link0"
    assert not any(k.startswith("FI_") or k in ("NCCL_NET_PLUGIN", "NCCL_NET") for k in cpu)


def test_cpu_job_targets_cpu_group_without_gpu_toleration(dev):
    m = render_pytorchjob(dev, "cpu-ddp", image=IMAGE)
    spec = _worker(m)["template"]["spec"]
    assert spec["nodeSelector"] == {NODEGROUP_LABEL: "cpu"}
    assert "tolerations" not in spec
    assert "nvidia.com/gpu" not in _container(m)["resources"]["requests"]


def test_gpu_job_tolerates_the_gpu_taint(dev):
    spec = _worker(render_pytorchjob(dev, "llama2-7b-fsdp", image=IMAGE))["template"]["spec"]
    assert [t["key"] for t in spec["tolerations"]] == [GPU_TAINT_KEY]


def test_elastic_policy_follows_the_preset(dev):
    preset = PRESETS["cpu-ddp"]
    m = render_pytorchjob(dev, "cpu-ddp", image=IMAGE)
    ep = m["spec"]["elasticPolicy"]
    assert ep["rdzvBackend"] == preset.torch_rdzv_backend
    assert (ep["minReplicas"], ep["maxReplicas"], ep["nProcPerNode"]) == (preset.nodes_min, preset.nodes_max, 2)
    assert ep["maxRestarts"] == preset.max_restarts
    assert _worker(m)["restartPolicy"] == "OnFailure"
    assert _container(m)["command"] == preset.command()


def test_rdzv_id_differs_per_job_name_and_is_stable(dev):
    a = render_pytorchjob(dev, "cpu-ddp", image=IMAGE, job_name="run-a")
    b = render_pytorchjob(dev, "cpu-ddp", image=IMAGE, job_name="run-b")
    again = render_pytorchjob(dev, "cpu-ddp", image=IMAGE, job_name="run-a")
    assert a["spec"]["elasticPolicy"]["rdzvId"] != b["spec"]["elasticPolicy"]["rdzvId"]
    assert a == again


def test_c10d_override_points_at_worker_zero(dev):
    m = render_pytorchjob(dev, "cpu-ddp", image=IMAGE, job_name="smoke", overrides={"rendezvous": "c10d"})
    ep = m["spec"]["elasticPolicy"]
    assert (ep["rdzvBackend"], ep["rdzvHost"]) == ("c10d", "smoke-worker-0")


def test_fsx_claim_and_memory_shm_are_mounted(dev):
    m = render_pytorchjob(dev, "cpu-ddp", image=IMAGE)
    volumes = {v["name"]: v for v in _worker(m)["template"]["spec"]["volumes"]}
    assert volumes["fsx"]["persistentVolumeClaim"]["claimName"] == FSX_CLAIM_NAME
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    mounts = {v["mountPath"] for v in _container(m)["volumeMounts"]}
    assert {"/fsx", "/dev/shm"} <= mounts


@pytest.mark.parametrize("preset,env_name,needle", [
    ("no-such-preset", "dev", "unknown preset"),
    ("llama2-7b-fsdp", "prod", "node group 'p4d'"),
])
def test_unknown_preset_or_missing_nodegroup_is_a_one_line_config_error(environments, preset, env_name, needle):
    with pytest.raises(ConfigError) as err:
        render_pytorchjob(environments[env_name], preset, image=IMAGE)
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("overrides,field", [
    ({"nproc_per_node": 9}, "nproc_per_node"),
    ({"nodes_max": 99}, "nodes_max"),
    ({"bogus": 1}, "bogus"),
    ({"env": {"HF_TOKEN": "hf_abc"}}, "HF_TOKEN"),
    ({"rendezvous": "zookeeper"}, "rendezvous"),
    ({"env": {"BAD NAME": "x"}}, "BAD NAME"),
    ({"nodes_min": True}, "nodes_min"),
])
def test_bad_overrides_are_rejected_naming_the_field(dev, overrides, field):
    with pytest.raises(ConfigError, match=field):
        render_pytorchjob(dev, "llama3-8b-fsdp", image=IMAGE, overrides=overrides)


@pytest.mark.parametrize("job_name", ["Bad_Name", "run\n"])  # `$` alone would let the newline through
def test_bad_job_name_is_rejected(dev, job_name):
    with pytest.raises(ConfigError, match="job_name"):
        render_pytorchjob(dev, "cpu-ddp", image=IMAGE, job_name=job_name)


def test_presets_render_only_where_their_node_group_exists(dev, prod):
    # dev's p5 group (maxSize 2) cannot hold the 4-node 70B presets; prod's (16) can.
    # llm-tiny-hf starts from a directory only `make local` generates: never rendered.
    assert {p.name for p in presets_for(dev)} == {n for n, p in PRESETS.items() if n not in (
        "llama2-70b-fsdp", "llama31-70b-fsdp", "llm-tiny-hf")}
    assert "llama2-7b-fsdp" not in {p.name for p in presets_for(prod)}


def test_plain_env_overrides_reach_the_container(dev):
    m = render_pytorchjob(dev, "cpu-ddp", image=IMAGE, overrides={"env": {"LOGLEVEL": "DEBUG"}})
    assert {"name": "LOGLEVEL", "value": "DEBUG"} in _container(m)["env"]


def test_the_job_tells_the_trainer_its_instance_type_for_mfu(dev):
    """trainer/metrics.py takes peak FLOPs from the instance-type table by TRAINER_INSTANCE_TYPE."""
    from config.instance_types import INSTANCE_TYPES

    env = {e["name"]: e.get("value") for e in _container(render_pytorchjob(dev, "llama3-8b-fsdp", image=IMAGE))["env"]}
    assert env["TRAINER_INSTANCE_TYPE"] == dev.nodegroup("p5").instance_type.name == "p5.48xlarge"
    assert INSTANCE_TYPES[env["TRAINER_INSTANCE_TYPE"]].peak_bf16_flops


@pytest.mark.parametrize("name", ["resnet50-imagenet", "efficientnetb7-imagenet"])
def test_imagenet_jobs_request_what_the_llm_jobs_on_p4d_request_and_run_elastic_on_etcd(dev, name):
    vision, llm = render_pytorchjob(dev, name, image=IMAGE), render_pytorchjob(dev, "llama2-7b-fsdp", image=IMAGE)
    res = _container(vision)["resources"]
    assert res == _container(llm)["resources"]  # every GPU, EFA interface and the hugepages, as for the LLMs
    assert res["requests"]["nvidia.com/gpu"] == "8" and res["requests"]["vpc.amazonaws.com/efa"] == "4"
    assert res["requests"]["hugepages-2Mi"] == res["limits"]["hugepages-2Mi"]
    env = {e["name"]: e.get("value") for e in _container(vision)["env"]}
    assert env["FI_PROVIDER"] == "efa"
    ep = vision["spec"]["elasticPolicy"]
    # The preset's range is 1..3 nodes; dev's p4d group holds 2, so the job grows to 2 there.
    assert (ep["rdzvBackend"], ep["minReplicas"], ep["maxReplicas"]) == ("etcd-v2", 1, 2)
    assert _worker(vision)["replicas"] == 2
    assert _container(vision)["command"][:5] == ["python", "-m", "trainer.launch", "--module", "trainer.vision"]


def test_an_explicit_node_range_past_the_node_group_is_still_an_error(dev):
    with pytest.raises(ConfigError, match="nodes_max"):
        render_pytorchjob(dev, "resnet50-imagenet", image=IMAGE, overrides={"nodes_max": 3})


@pytest.mark.parametrize("preset,overrides,field,world", [
    ("llm-tiny", {"nodes_min": 1, "nodes_max": 3}, "overrides.nodes_max", 6),  # 16 sequences over 6 ranks x 4
    ("vision-tiny", {"nproc_per_node": 3}, "overrides.nproc_per_node", 3),  # 64 images over 3 ranks x 16
])
def test_a_node_range_on_which_the_global_batch_does_not_divide_is_refused_naming_the_override(dev, preset,
                                                                                               overrides, field, world):
    """The trainer stops with exit 2 on a world size that does not divide its global batch: an
    elastic job re-formed there would end Failed once its nodes are up. Refused when rendered."""
    workload = PRESETS[preset].workload.values
    with pytest.raises(ConfigError) as err:
        render_pytorchjob(dev, preset, image=IMAGE, overrides=overrides)
    assert str(err.value).startswith(f"{field}: ")
    assert (f"global batch of {workload['global_batch_size']} does not divide over {world} ranks x --batch-size "
            f"{workload['batch_size']}") in str(err.value)
    assert "\n" not in str(err.value)


def _tiny_moe_with(monkeypatch, **batch):
    """llm-tiny-moe with another batch, under a name of its own. No shipped mixture of experts can
    reach the rule through --set alone: the world sizes that divide their global batches (16
    sequences of tiny-moe, 16 of Mixtral 8x7B) all divide their expert rows (gcd 32 and 2048)."""
    from dataclasses import replace
    base = PRESETS["llm-tiny-moe"]
    values = {k: v for k, v in base.workload.values.items() if k not in ("batch_size", "global_batch_size")}
    changed = replace(base, name="llm-tiny-moe-probe", workload=type(base.workload)(**values, **batch))
    monkeypatch.setitem(PRESETS, changed.name, changed)
    return changed.name


@pytest.mark.parametrize("batch,overrides,field,world,fitting", [
    # 2, 4 and 6 ranks divide 48 sequences, but 6 does not divide tiny-moe's 64 rows of w2.
    ({"batch_size": 1, "global_batch_size": 48}, {"nodes_min": 1, "nodes_max": 3}, "overrides.nodes_max", 6,
     {"nodes_min": 1, "nodes_max": 2}),
    # No global batch (ranks x --batch-size, which always divides): 2 nodes x 3 processes.
    ({"batch_size": 1}, {"nproc_per_node": 3}, "overrides.nproc_per_node", 6, {"nproc_per_node": 4}),
])
def test_a_node_range_on_which_the_expert_rows_do_not_divide_is_refused_naming_the_override(dev, monkeypatch, batch,
                                                                                           overrides, field, world,
                                                                                           fitting):
    """The trainer stops with exit 2 on a world size that does not divide a mixture of experts'
    expert rows (FSDP2 shards them evenly, trainer/parallel.py): refused when rendered, for every
    world size of the node range, with the trainer's own reason."""
    preset = _tiny_moe_with(monkeypatch, **batch)
    with pytest.raises(ConfigError) as err:
        render_pytorchjob(dev, preset, image=IMAGE, overrides=overrides)
    assert str(err.value).startswith(f"{field}: ")
    assert (f"tiny-moe shards its expert weights along rows of 96 and 64, which {world} ranks do not divide "
            "(FSDP2 shards them evenly)") in str(err.value)
    assert "exit 2" in str(err.value) and "\n" not in str(err.value)
    render_pytorchjob(dev, preset, image=IMAGE, overrides=fitting)  # 2, 4 or 8 ranks divide 96 and 64


def test_every_pods_torchrun_gives_each_rendezvous_round_a_store_of_its_own(environments, dev):
    """Shared across rounds, rank 0's agent store kept a failed round's addresses for the next
    (tests/trainer/test_preemption.py); every training pod, of either training API, turns it off."""
    from k8s.pods.torchrun_env import AGENT_ENV
    from k8s.pods.trainjob import node_pod_template, render_trainjob_run
    from preset_pods import rendered

    assert AGENT_ENV == {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    for env, preset, spec, env_vars in rendered(environments):
        assert env_vars["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1", (env.name, preset.name)
    runtime, _ = render_trainjob_run(dev, "cpu-ddp", image=IMAGE)
    node = node_pod_template(runtime)["spec"]["containers"][0]
    assert {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"} in node["env"]


def past_backoff_limit(backoff_limit: int, restart_counts: list[int]) -> bool:
    """Training Operator v1.9.4's PastBackoffLimit (kubeflow/trainer, tag v1.9.4, commit 4445c12a,
    pkg/core/job.go:93-133, called from pkg/controller.v1/common/job.go:200): the SUM of the
    restartCount of every container of every Running pod of the job (replicas under OnFailure,
    Always or ExitCode), compared with `>=` (with `> 0` when the limit is 0). `restart_counts`
    holds one Running pod's container restarts each."""
    total = sum(restart_counts)
    return total > 0 if backoff_limit == 0 else total >= backoff_limit


@pytest.mark.parametrize("nodes,max_restarts", [(1, 0), (1, 3), (2, 3), (3, 3), (4, 0), (4, 5)])
def test_max_restarts_counts_restarts_of_the_whole_group_not_of_each_pod(dev, nodes, max_restarts):
    """An event that stops the group (etcd lost mid-run: every torchrun agent exits 1 after its
    workers save) restarts every pod's container once, and the operator sums restarts over pods:
    with backoffLimit = max_restarts one etcd eviction ended a 3-node job Failed with its
    checkpoint saved. The job survives `max_restarts` whole-group restarts and fails on the next,
    as the v2 JobSet's failurePolicy.maxRestarts does."""
    m = render_pytorchjob(dev, "cpu-ddp", image=IMAGE,
                          overrides={"nodes_min": nodes, "nodes_max": nodes, "max_restarts": max_restarts})
    assert m["spec"]["elasticPolicy"]["maxReplicas"] == nodes
    limit = m["spec"]["runPolicy"]["backoffLimit"]
    for group_restarts in range(max_restarts + 1):
        assert not past_backoff_limit(limit, [group_restarts] * nodes), (group_restarts, limit)
    assert past_backoff_limit(limit, [max_restarts + 1] * nodes)


def deleted_once_finished(clean_pod_policy: str, pod_phase: str) -> bool:
    """Training Operator v1.9.4's DeletePodsAndServices for a Succeeded or Failed job (kubeflow/
    trainer, tag v1.9.4, commit 4445c12a, pkg/controller.v1/common/job.go:43-69; called at :229
    when the backoff limit fails the job, after the Failed condition is set at :227, and at :124 on
    every later sync of a finished job): None deletes nothing, Running deletes the pods still
    Running or Pending, All deletes every pod (values: pkg/apis/kubeflow.org/v1/common_types.go:
    166-169; the CRD's field is a free string)."""
    if clean_pod_policy == "None":
        return False
    if clean_pod_policy == "Running":
        return pod_phase in ("Running", "Pending")
    assert clean_pod_policy == "All", clean_pod_policy
    return True


def test_a_failed_job_gives_back_its_gpus_and_a_succeeded_job_keeps_its_pods_for_ops_logs(dev):
    """Under restartPolicy OnFailure the kubelet restarts a failed container in place, so when the
    backoff limit fails the job every pod is still Running: with cleanPodPolicy None they went on
    restarting and holding their GPUs (8 per p5 node) with the job shown Failed. A worker that
    exits 0 ends Succeeded, and `ops logs` reads worker 0's pod: that pod must stay."""
    m = render_pytorchjob(dev, "llama3-8b-fsdp", image=IMAGE)
    policy = m["spec"]["runPolicy"]["cleanPodPolicy"]
    assert deleted_once_finished(policy, "Running") and deleted_once_finished(policy, "Pending")
    assert not deleted_once_finished(policy, "Succeeded")


@pytest.mark.parametrize("nodes", [1, 2, 3])
def test_max_restarts_is_bounded_so_the_backoff_limit_fits_int32(dev, nodes):
    """runPolicy.backoffLimit is `format: int32` in the PyTorchJob CRD, and the API server refuses a
    larger value: the largest max_restarts renders a backoffLimit of at most 2**31 - 1, one more is
    a ConfigError naming max_restarts."""
    largest = (2**31 - 2) // nodes
    m = render_pytorchjob(dev, "cpu-ddp", image=IMAGE,
                          overrides={"nodes_min": nodes, "nodes_max": nodes, "max_restarts": largest})
    assert m["spec"]["runPolicy"]["backoffLimit"] <= 2**31 - 1
    with pytest.raises(ConfigError, match="max_restarts"):
        render_pytorchjob(dev, "cpu-ddp", image=IMAGE,
                          overrides={"nodes_min": nodes, "nodes_max": nodes, "max_restarts": largest + 1})


def test_a_presets_own_max_restarts_past_the_int32_bound_names_the_preset_field(dev):
    from dataclasses import replace

    from k8s.pods.pytorchjob import job_spec

    preset = replace(PRESETS["cpu-ddp"], max_restarts=2**31)
    with pytest.raises(ConfigError, match=r"presets\.cpu-ddp\.max_restarts"):
        job_spec(dev, preset, image=IMAGE)


def operator_rdzv_conf(elastic_policy: dict) -> str | None:
    """Training Operator v1.9's PET_RDZV_CONF from elasticPolicy.rdzvConf (release-1.9
    pkg/controller.v1/pytorch/elastic.go generateEnvRDZVConf): each `key=value`, joined by commas."""
    conf = elastic_policy.get("rdzvConf")
    return ",".join(f"{c['key']}={c['value']}" for c in conf) if conf else None


def test_a_rendezvous_round_waits_for_pods_still_on_their_way_to_a_node_half_an_hour_under_either_api(dev):
    """torch's dynamic rendezvous reads join_timeout (600 s by default; a 'timeout' key it ignores):
    a pod placed by a scale-up from zero joins after its instance launches and its image is pulled,
    and a round that times out costs its pods a restart. Both APIs' pods hand torchrun the same
    --rdzv-conf, and torchrun turns it into the handler's join timeout."""
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _get_timeout
    from torch.distributed.elastic.rendezvous.api import RendezvousParameters
    from torch.distributed.run import config_from_args, get_args_parser

    from k8s.pods.torchrun_env import RENDEZVOUS_JOIN_TIMEOUT_S
    from k8s.pods.trainjob import node_pod_template, render_trainjob_run

    v1 = operator_rdzv_conf(render_pytorchjob(dev, "llm-tiny", image=IMAGE)["spec"]["elasticPolicy"])
    runtime, _ = render_trainjob_run(dev, "llm-tiny", image=IMAGE)
    v2 = {e["name"]: e.get("value") for e in node_pod_template(runtime)["spec"]["containers"][0]["env"]}["PET_RDZV_CONF"]
    assert v1 == v2 == f"join_timeout={RENDEZVOUS_JOIN_TIMEOUT_S}"
    args = get_args_parser().parse_args(["--nnodes=1:2", "--rdzv-backend=etcd-v2", "--rdzv-endpoint=127.0.0.1:2379",
                                         f"--rdzv-conf={v2}", "train.py"])
    config, _, _ = config_from_args(args)
    params = RendezvousParameters(backend="etcd-v2", endpoint="127.0.0.1:2379", run_id="r", min_nodes=1,
                                  max_nodes=2, **config.rdzv_configs)
    assert _get_timeout(params, "join").total_seconds() == RENDEZVOUS_JOIN_TIMEOUT_S
