"""Gates on dist/<env>/: what `make synth` writes must apply cleanly and safely to a real cluster.

Each environment of cdk.json is written once (module fixture) through the same sink app.py uses.
The gates also cover what `ops` creates on that cluster: each preset's run as `ops start` renders
it (k8s/pods/pytorchjob.py render_run), and the validation objects dist/<env>/validation/ carries.
"""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from config import INSTANCE_TYPES
from config.kubernetes import FSX_CLAIM_NAME
from k8s.sinks import write_dist
from k8s.addons import ClusterValues
from k8s_walk import ENV_NAMES, build, containers, key, ops_objects, pod_specs, target_nodegroups

PLACEHOLDER = re.compile(r"^\$\{([A-Z][A-Z0-9_]*)\}$")
SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY)", re.I)
EXTENDED = ("nvidia.com/gpu", "vpc.amazonaws.com/efa", "hugepages-2Mi")


RUNS = "runs (ops start)"


@pytest.fixture(scope="module")
def dist(environments, tmp_path_factory):
    """env name -> (config, charts, files, objects read back from the YAML, and each preset's run)."""
    out = {}
    for name in ENV_NAMES:
        config = environments[name]
        charts = build(config)
        files = write_dist(charts, tmp_path_factory.mktemp("dist") / name)
        docs = [(str(f.relative_to(files[0].parent)), d) for f in files if f.suffix == ".yaml"
                for d in yaml.safe_load_all(f.read_text()) if d]
        docs += [(RUNS, o) for o in ops_objects(config) if o["kind"] == "PyTorchJob" and o["metadata"]["name"]
                 not in {d["metadata"]["name"] for f, d in docs if f.startswith("validation/")}]
        out[name] = (config, charts, files, docs)
    return out


def _all(dist):
    for env, (config, _, _, docs) in dist.items():
        for file, obj in docs:
            yield env, config, file, obj


def test_every_environment_gets_one_yaml_file_per_chart_in_dependency_order(dist):
    for env, (_, charts, files, _) in dist.items():
        yaml_files = [f.name for f in files if f.suffix == ".yaml" and f.parent == files[0].parent]
        assert yaml_files == sorted(yaml_files), "kubectl applies a directory in name order"
        assert [n.split("-", 1)[1].removesuffix(".yaml") for n in yaml_files] == [e.name for e in charts.entries]
        positions = {e.name: i for i, e in enumerate(charts.entries)}
        for entry in charts.entries:
            assert all(positions[d] < positions[entry.name] for d in entry.depends_on), entry.name


def test_built_in_objects_validate_strictly_against_the_cluster_version(dist):
    checked = 0
    for env, config, file, obj in _all(dist):
        if obj["apiVersion"].startswith("kubeflow.org/"):
            continue
        try:
            kubernetes_validate.validate(obj, config.kubernetes_version, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{env}/{file} {key(obj)}: {err.message} at {list(err.path)}")
        checked += 1
    assert checked > 20


def test_strict_validation_would_catch_an_unknown_field(dist):
    config, _, _, docs = dist["dev"]
    deployment = next(o for _, o in docs if o["kind"] == "Deployment")
    bad = yaml.safe_load(yaml.safe_dump(deployment))
    bad["spec"]["template"]["spec"]["containers"][0]["imagePullPolice"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, config.kubernetes_version, strict=True)


def test_efa_environment_only_where_efa_devices_are_requested(dist):
    """A pod told to use libfabric's EFA provider without EFA devices silently falls back to TCP."""
    from k8s.pods.network_env import EFA_ENV

    seen = 0
    for env, _, file, obj in _all(dist):
        for where, spec in pod_specs(obj):
            for c in containers(spec):
                env_names = {e["name"] for e in c.get("env", [])}
                if any(n.startswith("FI_") or n in dict(EFA_ENV) for n in env_names):
                    seen += 1
                    requests = c.get("resources", {}).get("requests", {})
                    assert int(requests.get("vpc.amazonaws.com/efa", 0)) > 0, f"{env} {where}/{c['name']}"
    assert seen, "no EFA pod in any environment: the rule checked nothing"


def test_extended_resources_request_what_they_limit_and_fit_the_instance(dist):
    for env, config, file, obj in _all(dist):
        for where, spec in pod_specs(obj):
            for c in containers(spec):
                res = c.get("resources", {})
                requested = {k: res.get("requests", {}).get(k) for k in EXTENDED if k in res.get("requests", {})}
                if not requested:
                    continue
                assert {k: res.get("limits", {}).get(k) for k in requested} == requested, f"{env} {where}"
                groups = target_nodegroups(spec)
                assert groups, f"{env} {where} requests {sorted(requested)} but targets no node group"
                for group in groups:
                    instance = config.nodegroup(group).instance_type
                    assert int(requested.get("nvidia.com/gpu", 0)) <= instance.gpus, f"{env} {where} on {group}"
                    assert int(requested.get("vpc.amazonaws.com/efa", 0)) <= instance.efa_interfaces, where


def test_pytorchjob_processes_fit_the_gpus_requested(dist):
    for env, config, file, obj in _all(dist):
        if obj["kind"] != "PyTorchJob":
            continue
        worker = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
        gpus = int(worker["containers"][0]["resources"]["requests"].get("nvidia.com/gpu", 0))
        instance = config.nodegroup(target_nodegroups(worker)[0]).instance_type
        if instance.is_gpu:
            assert obj["spec"]["elasticPolicy"]["nProcPerNode"] <= gpus == instance.gpus


def test_rendezvous_host_names_a_service_that_exists(dist):
    for env, (_, _, _, docs) in dist.items():
        services = {(o["metadata"]["namespace"], o["metadata"]["name"]) for _, o in docs if o["kind"] == "Service"}
        jobs = [o for _, o in docs if o["kind"] == "PyTorchJob"]
        assert jobs
        for job in jobs:
            policy = job["spec"]["elasticPolicy"]
            host = policy["rdzvHost"]
            if policy["rdzvBackend"] == "c10d":
                # The operator creates a Service per replica; worker 0 hosts the c10d store.
                assert host == f"{job['metadata']['name']}-worker-0"
                continue
            name, namespace, *_ = host.split(".") + [job["metadata"]["namespace"]]
            assert (namespace, name) in services, f"{env}: {job['metadata']['name']} rendezvous host {host}"
            service = next(o for _, o in docs if o["kind"] == "Service" and o["metadata"]["name"] == name)
            assert policy["rdzvPort"] in [p["port"] for p in service["spec"]["ports"]]


def test_every_claim_and_volume_exists(dist):
    for env, (_, _, _, docs) in dist.items():
        claims = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for _, o in docs
                  if o["kind"] == "PersistentVolumeClaim"}
        volumes = {o["metadata"]["name"]: o for _, o in docs if o["kind"] == "PersistentVolume"}
        assert list(claims) == [("training", FSX_CLAIM_NAME)], "one claim name everywhere"
        used = 0
        for _, obj in docs:
            for where, spec in pod_specs(obj):
                for volume in spec.get("volumes", []):
                    if "persistentVolumeClaim" in volume:
                        used += 1
                        claim = (obj["metadata"]["namespace"], volume["persistentVolumeClaim"]["claimName"])
                        assert claim in claims, f"{env} {where} mounts missing claim {claim}"
        assert used
        for claim in claims.values():
            volume = volumes[claim["spec"]["volumeName"]]
            ref = volume["spec"]["claimRef"]
            assert (ref["namespace"], ref["name"]) == (claim["metadata"]["namespace"], claim["metadata"]["name"])
            assert claim["spec"]["accessModes"] == volume["spec"]["accessModes"] == ["ReadWriteMany"]


def _image_refs(obj: dict):
    for where, spec in pod_specs(obj):
        for c in containers(spec):
            yield where, c["image"]
            for arg in c.get("args", []):
                if arg.startswith("--") and arg.split("=")[0].endswith("-image"):
                    yield where, arg.split("=", 1)[1]


def test_every_image_is_pinned_by_tag_or_digest(dist):
    for env, (_, charts, _, docs) in dist.items():
        placeholders = {p.name for p in charts.values.placeholders_in_use()}
        for _, obj in docs:
            for where, image in _image_refs(obj):
                match = PLACEHOLDER.match(image)
                if match:
                    # Filled at apply time with the asset-hash-tagged URI CDK builds.
                    assert match.group(1) in placeholders, f"{env} {where}: undocumented placeholder {image}"
                    continue
                if "@sha256:" in image:
                    continue
                last = image.rsplit("/", 1)[-1]
                assert ":" in last, f"{env} {where}: {image} has no tag"
                assert last.split(":", 1)[1] not in ("latest", ""), f"{env} {where}: {image} floats"


def test_no_secret_value_is_inline(dist):
    for env, config, file, obj in _all(dist):
        if obj["kind"] == "Secret":
            assert not obj.get("data") and not obj.get("stringData"), f"{env} {key(obj)} carries secret data"
        for where, spec in pod_specs(obj):
            for c in containers(spec):
                for var in c.get("env", []):
                    if SECRET_NAME.search(var["name"]):
                        assert "value" not in var and "secretKeyRef" in var.get("valueFrom", {}), \
                            f"{env} {where}: {var['name']} must come from a Secret"


def test_dist_carries_placeholders_never_raw_tokens(dist):
    for env, (_, charts, files, _) in dist.items():
        text = "".join(f.read_text() for f in files)
        assert "${Token[" not in text and "Fn::" not in text
        readme = next(f for f in files if f.name == "README.md").read_text()
        for placeholder in charts.values.placeholders_in_use():
            assert f"${{{placeholder.name}}}" in text or placeholder.name.startswith("TRAINER_IMAGE")
            assert placeholder.name in readme


def test_objects_live_in_namespaces_the_charts_create(dist):
    for env, (_, _, _, docs) in dist.items():
        created = {o["metadata"]["name"] for _, o in docs if o["kind"] == "Namespace"} | {"kube-system"}
        for file, obj in docs:
            namespace = obj["metadata"].get("namespace")
            assert namespace is None or namespace in created, f"{env}/{file} {key(obj)}"


def test_presets_appear_only_where_their_node_group_exists(dist):
    for env, (config, _, _, docs) in dist.items():
        groups = {g.name for g in config.training_nodegroups}
        for _, obj in docs:
            if obj["kind"] == "PyTorchJob":
                worker = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
                assert set(target_nodegroups(worker)) <= groups


def test_validation_covers_every_gpu_node_group(dist):
    for env, (config, _, _, docs) in dist.items():
        checks = [o for _, o in docs if o["kind"] == "Job" and o["metadata"]["name"].startswith("gpu-check-")]
        targeted = sorted(g for o in checks for g in target_nodegroups(o["spec"]["template"]["spec"]))
        assert targeted == sorted(g.name for g in config.gpu_nodegroups)
        nccl = [o for _, o in docs if o["kind"] == "MPIJob"]
        efa_groups = [g for g in config.gpu_nodegroups if g.instance_type.supports_efa and g.max_size >= 2]
        assert len(nccl) == len(efa_groups)
        for job in nccl:
            worker = job["spec"]["mpiReplicaSpecs"]["Worker"]
            group = config.nodegroup(target_nodegroups(worker["template"]["spec"])[0])
            assert worker["replicas"] == 2
            # ops/nccl.py judges each pair against this type's floor.
            instance = job["metadata"]["annotations"]["eks-distributed-training.io/instance-type"]
            assert instance == group.instance_type_name and INSTANCE_TYPES[instance].nccl_busbw_floor_gbps


def test_a_chart_with_an_unnamed_token_refuses_to_write(dev, tmp_path):
    from aws_cdk import Token

    from k8s.charts import EnvironmentCharts
    from k8s.sinks import UnresolvedTokenError

    import cdk8s
    named = Token.as_string({"Ref": "FileSystem"})
    values = ClusterValues(fsx_file_system_id=named, fsx_dns_name=Token.as_string({"Ref": "Dns"}),
                           fsx_mount_name="mnt", trainer_images={"cpu": "a:1", "gpu": "b:1"},
                           kubectl_delivery_image=Token.as_string({"Ref": "KubectlImage"}))
    written = write_dist(EnvironmentCharts(dev, values, app=cdk8s.App()), tmp_path / "ok")
    text = "".join(p.read_text() for p in written)
    assert "${FSX_FILE_SYSTEM_ID}" in text and "${FSX_DNS_NAME}" in text
    # A token inside a longer value (a flag) is substituted too.
    assert "--mpi-kubectl-delivery-image=${KUBECTL_DELIVERY_IMAGE}" in text
    hidden = ClusterValues(fsx_file_system_id="fs-1", fsx_dns_name="d", fsx_mount_name="m",
                           trainer_images={"cpu": "a:1", "gpu": "b:1"})
    charts = EnvironmentCharts(dev, hidden, app=cdk8s.App())
    # A token the values do not know about (as if a chart read a stack attribute directly).
    training = next(o for o in charts.entry("namespaces").chart.api_objects if o.name == "training")
    training.metadata.add_annotation("x", Token.as_string({"Ref": "Other"}))
    with pytest.raises(UnresolvedTokenError, match="namespaces"):
        write_dist(charts, tmp_path / "bad")


def test_dist_readme_explains_how_to_fill_placeholders(dist):
    _, charts, files, _ = dist["dev"]
    readme = next(f for f in files if f.name == "README.md").read_text()
    assert "envsubst" in readme and "condition=established" in readme
    # The same wait the Workloads stack makes: the webhook fails closed.
    assert ("*-training-operator.yaml) kubectl rollout status -n kubeflow deployment/training-operator "
            "--timeout=10m;; esac") in readme
    assert Path(files[0]).parent.name == "dev"


def test_etcd_network_policy_admits_every_pod_that_rendezvouses_through_etcd(dist):
    for env, (_, _, _, docs) in dist.items():
        policy = next(o for _, o in docs if o["kind"] == "NetworkPolicy" and o["metadata"]["namespace"] == "training")
        [rule] = policy["spec"]["ingress"]
        allowed = rule["from"][0]["podSelector"]["matchLabels"]
        etcd_jobs = [o for _, o in docs if o["kind"] == "PyTorchJob"
                     and o["spec"]["elasticPolicy"]["rdzvBackend"].startswith("etcd")]
        assert etcd_jobs
        for job in etcd_jobs:
            labels = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]
            assert allowed.items() <= labels.items(), f"{env} {job['metadata']['name']} cannot reach etcd"
            assert job["spec"]["elasticPolicy"]["rdzvPort"] in [p["port"] for p in rule["ports"]]


def test_dist_readme_exports_each_placeholder_from_its_source(dev, tmp_path):
    import cdk8s

    from k8s.charts import EnvironmentCharts
    fill = "$(aws cloudformation describe-stacks --stack-name dev-Storage --output text)"
    values = ClusterValues.placeholders(fills={"FSX_FILE_SYSTEM_ID": fill})
    written = write_dist(EnvironmentCharts(dev, values, app=cdk8s.App()), tmp_path)
    readme = next(f for f in written if f.name == "README.md").read_text()
    assert f"export FSX_FILE_SYSTEM_ID={fill}" in readme
    assert "export FSX_DNS_NAME=..." in readme


def test_every_pod_runs_under_the_runtime_default_seccomp_profile(dist):
    """The restricted Pod Security profile's seccomp rule, on every pod template of every chart."""
    checked = 0
    for env, config, file, obj in _all(dist):
        for where, spec in pod_specs(obj):
            profiles = {c.get("securityContext", {}).get("seccompProfile", {}).get("type") for c in containers(spec)}
            pod_profile = spec.get("securityContext", {}).get("seccompProfile", {}).get("type")
            assert pod_profile == "RuntimeDefault" and profiles <= {None, "RuntimeDefault"}, f"{env} {where}"
            checked += 1
    assert checked > 10


def _extended(container: dict) -> dict:
    requests = container.get("resources", {}).get("requests", {})
    return {k: str(requests[k]) for k in EXTENDED if k in requests}


def test_validation_pods_request_exactly_what_training_pods_of_their_node_group_request(dist):
    """A node that passes validation must be able to schedule the training pods: same GPUs, EFA
    interfaces and huge pages. (The GPU check used to drop hugepages-2Mi.)"""
    from k8s.pods.resources import accelerator_resources

    compared = 0
    for env, (config, _, _, docs) in dist.items():
        for _, obj in docs:
            if obj["kind"] not in ("Job", "PyTorchJob", "MPIJob"):
                continue
            for where, spec in pod_specs(obj):
                groups = target_nodegroups(spec)
                if not groups or not config.nodegroup(groups[0]).instance_type.is_gpu:
                    continue  # CPU jobs, and the MPI launcher, which runs anywhere
                [group] = groups
                main = spec["containers"][0]
                expected = accelerator_resources(config.nodegroup(group).instance_type)
                assert _extended(main) == expected, f"{env} {where} on {group}"
                compared += 1
    assert compared >= 6  # gpu checks, NCCL workers and GPU PyTorchJobs


def test_pytorchjobs_say_which_instance_type_they_run_on(dist):
    """trainer/metrics.py reads TRAINER_INSTANCE_TYPE for the peak FLOPs behind MFU."""
    for env, (config, _, _, docs) in dist.items():
        for _, obj in docs:
            if obj["kind"] == "PyTorchJob":
                spec = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
                env_vars = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
                assert env_vars["TRAINER_INSTANCE_TYPE"] == config.nodegroup(target_nodegroups(spec)[0]).instance_type_name


def test_dist_readme_lists_its_prerequisites_and_where_jobs_come_from(dist):
    config, charts, files, docs = dist["dev"]
    readme = next(f for f in files if f.name == "README.md").read_text()
    assert "## Prerequisites" in readme
    assert ("`aws eks update-kubeconfig --name dev-training --region us-west-2 --role-arn "
            "arn:aws:iam::111111111111:role/PlatformAdmin`") in readme
    assert "endpointAccess.publicCidrs (203.0.113.0/24)" in readme
    assert "kubectl within one minor version of Kubernetes 1.35" in readme
    jobs = readme.split("## Jobs and runs", 1)[1].split("\n## ", 1)[0]
    assert "they hold no PyTorchJob, MPIJob or Job" in jobs and "python -m ops start PRESET --env dev" in jobs
    for file, obj in docs:
        if file.startswith("validation/"):
            assert f"{obj['kind']} `{obj['metadata']['name']}`" in jobs
    assert "python -m ops validate --dist dist/dev" in jobs
    prod_readme = next(f for f in dist["prod"][2] if f.name == "README.md").read_text()
    assert "from inside the VPC (the endpoint is private)" in prod_readme


def test_applied_files_hold_no_job_and_validation_objects_are_never_applied(dist):
    """The README applies `dist/<env>/*.yaml`: no job there, so re-applying never touches one.
    The validation objects sit one folder down, created by `ops validate` to run (no suspend)."""
    for env, (_, _, files, docs) in dist.items():
        applied = [o for file, o in docs if "/" not in file and file != RUNS]
        assert applied and not {o["kind"] for o in applied} & {"Job", "MPIJob", "PyTorchJob"}, env
        checks = [o for file, o in docs if file.startswith("validation/")]
        assert {o["kind"] for o in checks} == {"Job", "MPIJob", "PyTorchJob"}, env
        for obj in checks:
            spec = obj["spec"].get("runPolicy", {}) if obj["kind"] != "Job" else obj["spec"]
            assert "suspend" not in spec, obj["metadata"]["name"]
