"""`ops submit` and `ops data` without --image: the trainer image the environment's Registry stack published,
read from its CloudFormation outputs (a moto server on loopback answers DescribeStacks)."""

from __future__ import annotations

import pytest
import yaml

from config.outputs import trainer_image_output
from ops_fakes import deploy_registry, isolated_aws_env, run_ops

GPU_IMAGE = "111111111111.dkr.ecr.us-west-2.amazonaws.com/cdk-hnb659fds-container-assets-111111111111-us-west-2:abc123"
CPU_IMAGE = GPU_IMAGE.replace("abc123", "cpu456")


def submit_dry_run(aws: str, tmp_path, preset: str):
    return run_ops(["submit", "--env", "dev", "--preset", preset, "--name", "smoke", "--dry-run"],
                   isolated_aws_env(tmp_path, aws))


def image_of(stdout: str) -> str:
    *_, run = yaml.safe_load_all(stdout)  # the peers policy, then the run
    return run["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"]


def test_image_defaults_to_the_registry_stacks_output_for_the_presets_variant(aws, tmp_path):
    deploy_registry(aws, "dev-Registry", {trainer_image_output("gpu"): GPU_IMAGE,
                                          trainer_image_output("cpu"): CPU_IMAGE})
    gpu = submit_dry_run(aws, tmp_path, "llama3-8b-fsdp")
    assert gpu.returncode == 0, gpu.stderr
    assert image_of(gpu.stdout) == GPU_IMAGE
    cpu = submit_dry_run(aws, tmp_path, "cpu-ddp")
    assert image_of(cpu.stdout) == CPU_IMAGE


def test_a_pipeline_deployed_stage_is_found_by_its_prefixed_stack_name(aws, tmp_path):
    deploy_registry(aws, "Pipeline-dev-Registry", {trainer_image_output("cpu"): CPU_IMAGE})
    result = submit_dry_run(aws, tmp_path, "cpu-ddp")
    assert result.returncode == 0, result.stderr
    assert image_of(result.stdout) == CPU_IMAGE


@pytest.mark.parametrize("stacks, words", [
    ({}, ["no stack dev-Registry in 111111111111/us-west-2", "make deploy ENV=dev", "--image"]),
    ({"dev-Registry": {"RepositoryUri": "x"}}, ["stack dev-Registry has no output TrainerImageUriCpu", "--image"]),
])
def test_without_the_stack_or_its_output_submit_says_so_in_one_line(aws, tmp_path, stacks, words):
    for name, outputs in stacks.items():
        deploy_registry(aws, name, outputs)
    result = submit_dry_run(aws, tmp_path, "cpu-ddp")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [line] = result.stderr.splitlines()
    for word in words:
        assert word in line


def test_a_bad_override_fails_before_any_aws_call(tmp_path):
    result = run_ops(["submit", "--env", "dev", "--preset", "cpu-ddp", "--set", "rendezvous=zmq", "--dry-run"],
                     isolated_aws_env(tmp_path))  # every AWS endpoint is a dead port
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("config error: overrides.rendezvous: must be one of etcd, c10d")

def test_ops_data_takes_the_same_cpu_image_when_none_is_given(aws, tmp_path):
    deploy_registry(aws, "dev-Registry", {trainer_image_output("gpu"): GPU_IMAGE,
                                          trainer_image_output("cpu"): CPU_IMAGE})
    result = run_ops(["data", "--env", "dev", "--source", "c4", "--dry-run"], isolated_aws_env(tmp_path, aws))
    assert result.returncode == 0, result.stderr
    [container] = yaml.safe_load(result.stdout)["spec"]["template"]["spec"]["containers"]
    assert container["image"] == CPU_IMAGE


def test_ops_data_names_an_unknown_source_before_any_aws_call(tmp_path):
    result = run_ops(["data", "--env", "dev", "--source", "coco", "--dry-run"], isolated_aws_env(tmp_path))
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["error: --source: 'coco' is not a data source of dev; its sources: imagenet, c4"]


def test_a_report_that_can_do_without_the_images_gets_the_reason_instead(monkeypatch):
    from ops import images
    from ops.envconfig import load
    from ops.errors import OpsError

    def missing(env, variant):
        raise OpsError(f"no stack {env.name}-Registry in {env.account}/{env.region}: deploy the environment first")

    monkeypatch.setattr(images, "published_image", missing)
    assert images.published_images(load("dev")) == (
        None, "no stack dev-Registry in 111111111111/us-west-2: deploy the environment first")
    monkeypatch.setattr(images, "published_image", lambda env, variant: f"registry/trainer:{variant}-1")
    assert images.published_images(load("dev")) == ({"cpu": "registry/trainer:cpu-1", "gpu": "registry/trainer:gpu-1"}, "")
