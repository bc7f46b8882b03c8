"""Registry stack: the trainer's ECR repository and the trainer images' build context."""

import json

import pytest
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets

from synth_helpers import only, synth


@pytest.fixture(scope="module")
def dev():
    return synth("dev")


@pytest.fixture(scope="module")
def repository(dev):
    return only(dev.templates["registry"].find_resources("AWS::ECR::Repository"))


def test_scan_on_push_and_immutable_tags(repository):
    props = repository["Properties"]
    assert props["ImageScanningConfiguration"] == {"ScanOnPush": True}
    assert props["ImageTagMutability"] == "IMMUTABLE"


def test_encrypted_with_a_rotating_customer_key(dev, repository):
    encryption = repository["Properties"]["EncryptionConfiguration"]
    assert encryption["EncryptionType"] == "KMS"
    key = dev.template_json("registry")["Resources"][encryption["KmsKey"]["Fn::GetAtt"][0]]
    assert key["Properties"]["EnableKeyRotation"] is True


def test_lifecycle_expires_untagged_images_and_caps_the_count(repository):
    rules = json.loads(repository["Properties"]["LifecyclePolicy"]["LifecyclePolicyText"])["rules"]
    selections = [r["selection"] for r in rules]
    assert {"tagStatus": "untagged", "countType": "sinceImagePushed", "countNumber": 7, "countUnit": "days"} in selections
    assert {"tagStatus": "any", "countType": "imageCountMoreThan", "countNumber": 50} in selections


def test_destroy_environment_empties_and_deletes_repository_and_key(dev, repository):
    assert repository["DeletionPolicy"] == "Delete"
    assert repository["Properties"]["EmptyOnDelete"] is True
    dev.templates["registry"].has_resource("AWS::KMS::Key", {"DeletionPolicy": "Delete"})


def test_retain_environment_keeps_repository_images_and_key():
    prod = synth("prod").templates["registry"]
    repo = only(prod.find_resources("AWS::ECR::Repository"))
    assert repo["DeletionPolicy"] == "Retain"
    assert repo["Properties"].get("EmptyOnDelete") in (None, False)
    prod.has_resource("AWS::KMS::Key", {"DeletionPolicy": "Retain"})


def test_typed_attributes(dev):
    stack = dev.stage.registry
    assert isinstance(stack.repository, ecr.Repository)
    assert set(stack.trainer_images) == {"cpu", "gpu"}
    assert all(isinstance(i, ecr_assets.DockerImageAsset) for i in stack.trainer_images.values())


def _docker_assets(dev):
    manifests = list(dev.outdir.glob("**/*Registry*.assets.json"))
    assets = json.loads(manifests[0].read_text())["dockerImages"]
    return {a["source"]["dockerFile"]: (manifests[0].parent / a["source"]["directory"]).resolve()
            for a in assets.values()}


def test_images_build_from_the_trainer_dockerfiles(dev):
    assert set(_docker_assets(dev)) == {"trainer/Dockerfile", "trainer/Dockerfile.cpu"}


def test_image_build_context_holds_only_trainer_config_and_requirements(dev):
    for context in _docker_assets(dev).values():
        top = {p.name for p in context.iterdir()}
        assert top <= {"trainer", "config", "requirements.txt"}, top
        assert {"trainer", "config"} <= top
        assert not list(context.glob("**/__pycache__"))


def test_outputs_for_humans(dev):
    assert "RepositoryUri" in dev.templates["registry"].find_outputs("*")


def test_outputs_name_the_trainer_image_each_deployed_job_runs(dev):
    """`ops submit` reads these to default --image (ops/images.py)."""
    from config.outputs import trainer_image_output

    outputs = dev.templates["registry"].find_outputs("*")
    repo = (f"{dev.config.account}.dkr.ecr.{dev.config.region}.${{AWS::URLSuffix}}/"
            f"cdk-hnb659fds-container-assets-{dev.config.account}-{dev.config.region}")
    for variant, asset in dev.stage.registry.trainer_images.items():
        assert outputs[trainer_image_output(variant)]["Value"] == {"Fn::Sub": f"{repo}:{asset.image_tag}"}
        # The same URI the preset jobs of the Workloads stack run.
        assert dev.stage.workloads.charts.values.trainer_images[variant] == asset.image_uri
