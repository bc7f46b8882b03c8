"""What `ops validate` creates (k8s/pods/validation.py): GPU checks, NCCL test templates, the smoke run."""

from dataclasses import replace

from config.kubernetes import NCCL_INSTANCE_TYPE_ANNOTATION
from k8s.pods.names import PART_OF
from k8s.pods.validation import COMPONENT, SMOKE_CHECKPOINT_ROOT, SMOKE_RUN, validation_objects
from k8s_walk import pod, target_nodegroups


def test_the_smoke_run_is_a_validation_object_only_where_its_node_group_exists(dev, prod):
    for config in (dev, prod):
        [smoke] = [o for o in validation_objects(config) if o["kind"] == "PyTorchJob"]
        assert smoke["metadata"]["name"] == SMOKE_RUN
        container = smoke["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        assert container["image"] == "${TRAINER_IMAGE_CPU}", "ops validate fills it"
        assert f"{SMOKE_CHECKPOINT_ROOT}/cpu-ddp/snapshot.pt" in container["command"], "not a user run's folder"
        assert "suspend" not in smoke["spec"]["runPolicy"]
    assert not [o for o in validation_objects(replace(dev, cpu_nodegroups=())) if o["kind"] == "PyTorchJob"]


def test_gpu_checks_request_every_device_of_their_node_group(dev):
    docs = validation_objects(dev)
    assert all("suspend" not in d["spec"] for d in docs if d["kind"] == "Job"), "ops validate creates them to run"
    checks = [d for d in docs if d["kind"] == "Job"]
    assert len(checks) == len(dev.gpu_nodegroups)
    for job in checks:
        spec = pod(job)
        [group] = target_nodegroups(spec)
        instance = dev.nodegroup(group).instance_type
        container = spec["containers"][0]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == str(instance.gpus)
        assert container["resources"]["limits"]["vpc.amazonaws.com/efa"] == str(instance.efa_interfaces)
        script = container["command"][-1]
        assert "nvidia-smi" in script and f'-eq {instance.efa_interfaces} ]' in script
        assert spec["restartPolicy"] == "Never"


def test_nccl_template_spans_two_nodes_and_names_the_type_whose_floor_judges_it(dev):
    docs = validation_objects(dev)
    jobs = [d for d in docs if d["kind"] == "MPIJob"]
    assert len(jobs) == 2  # p4d and p5 in dev
    for job in jobs:
        replicas = job["spec"]["mpiReplicaSpecs"]
        group = dev.nodegroup(target_nodegroups(replicas["Worker"]["template"]["spec"])[0])
        assert replicas["Worker"]["replicas"] == 2
        assert job["spec"]["slotsPerWorker"] == group.instance_type.gpus
        assert job["metadata"]["annotations"][NCCL_INSTANCE_TYPE_ANNOTATION] == group.instance_type.name
        script = replicas["Launcher"]["template"]["spec"]["containers"][0]["command"][-1]
        assert f"-np {2 * group.instance_type.gpus}" in script and "all_reduce_perf -b 1G " in script
        assert "FI_PROVIDER=efa" in script


def test_the_checks_and_templates_carry_the_project_labels(dev):
    """As the charts' objects do; the smoke run is labelled as every run is."""
    for obj in validation_objects(dev):
        if obj["kind"] != "PyTorchJob":
            labels = obj["metadata"]["labels"]
            assert (labels["app.kubernetes.io/part-of"], labels["app.kubernetes.io/component"]) == (PART_OF, COMPONENT)


def test_an_environment_without_gpus_gets_only_the_smoke_run(dev):
    assert {o["kind"] for o in validation_objects(replace(dev, gpu_nodegroups=()))} == {"PyTorchJob"}


def test_under_trainer_v2_the_smoke_run_is_a_runtime_then_its_trainjob_rendered_as_user_runs_are(dev):
    """A v2 cluster has no PyTorchJob kind. The smoke run is what render_trainjob_run makes of the
    preset, with validation's checkpoint folder, labelled so `ops start` never counts it a user's run."""
    from config.kubernetes import VALIDATION_LABEL
    from k8s.pods.trainjob import node_pod_template, render_trainjob_run

    v2 = replace(dev, training_api="v2")
    objects = validation_objects(v2)
    assert not [o for o in objects if o["kind"] == "PyTorchJob"]
    runtime, trainjob = [o for o in objects if o["kind"] in ("TrainingRuntime", "TrainJob")]
    assert (runtime["kind"], trainjob["kind"]) == ("TrainingRuntime", "TrainJob"), "the runtime is created first"
    expected = render_trainjob_run(v2, "cpu-ddp", image="${TRAINER_IMAGE_CPU}", job_name=SMOKE_RUN,
                                   checkpoint_root=SMOKE_CHECKPOINT_ROOT)
    for got, want in zip((runtime, trainjob), expected):
        assert got["metadata"]["labels"].pop(VALIDATION_LABEL) == "true"
        assert got == want
    container = node_pod_template(runtime)["spec"]["containers"][0]
    assert f"{SMOKE_CHECKPOINT_ROOT}/cpu-ddp/snapshot.pt" in container["command"]
    assert not [o for o in validation_objects(replace(v2, cpu_nodegroups=())) if o["kind"].startswith("Train")]
