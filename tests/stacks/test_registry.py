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


def test_image_build_context_holds_only_trainer_and_config(dev):
    """The development pins at the top (requirements.txt, requirements-checkov.txt) are no image's:
    in the context, a new test tool's pin would rebuild both images."""
    for context in _docker_assets(dev).values():
        top = {p.name for p in context.iterdir()}
        assert top == {"trainer", "config"}, top
        assert not list(context.glob("**/__pycache__"))


def test_outputs_for_humans(dev):
    assert "RepositoryUri" in dev.templates["registry"].find_outputs("*")


def _copies(dev) -> dict[str, dict]:
    return dev.templates["registry"].find_resources("Custom::TrainerImageCopy")


def test_each_image_is_copied_into_the_trainer_repository_under_its_asset_tag(dev):
    """aws-cdk-lib publishes image assets to the bootstrap's container-assets repository only; the
    copy puts them where scan on push, immutable tags, the KMS key and the lifecycle apply."""
    repository = dev.logical_id("registry", dev.stage.registry.repository)
    copies = {c["Properties"]["Tag"]: c["Properties"] for c in _copies(dev).values()}
    assert set(copies) == {a.image_tag for a in dev.stage.registry.trainer_images.values()}
    for props in copies.values():
        assert props["DestinationRepository"] == {"Ref": repository}
        assert props["SourceRepository"] == f"cdk-hnb659fds-container-assets-{dev.config.account}-{dev.config.region}"


def test_the_copy_handler_may_read_the_assets_repository_and_write_only_the_trainer_repository(dev):
    resources = dev.template_json("registry")["Resources"]
    role = {"Ref": dev.stage.registry.get_logical_id(dev.stage.registry.image_copy.role.node.default_child)}
    [policy] = [r["Properties"]["PolicyDocument"]["Statement"] for r in resources.values()
                if r["Type"] == "AWS::IAM::Policy" and role in r["Properties"]["Roles"]]
    grants = {json.dumps(s["Resource"], sort_keys=True): set(s["Action"] if isinstance(s["Action"], list)
                                                             else [s["Action"]]) for s in policy}
    repository = dev.logical_id("registry", dev.stage.registry.repository)
    writes = grants.pop(json.dumps({"Fn::GetAtt": [repository, "Arn"]}, sort_keys=True))
    assert writes == {"ecr:BatchGetImage", "ecr:BatchCheckLayerAvailability", "ecr:InitiateLayerUpload",
                      "ecr:UploadLayerPart", "ecr:CompleteLayerUpload", "ecr:PutImage"}
    reads = [actions for resource, actions in grants.items() if "container-assets" in resource]
    assert reads == [{"ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"}]
    # What is left: the handler's own log group, and its dead-letter queue and that queue's key.
    queue = dev.stage.registry.get_logical_id(dev.stage.registry.image_copy.dead_letters.node.default_child)
    key = dev.stage.registry.get_logical_id(dev.stage.registry.logs.key.node.default_child)
    rest = {r: a for r, a in grants.items() if "container-assets" not in r}
    assert rest.pop(json.dumps({"Fn::GetAtt": [queue, "Arn"]}, sort_keys=True)) == {"sqs:SendMessage"}
    assert rest.pop(json.dumps({"Fn::GetAtt": [key, "Arn"]}, sort_keys=True)) == {"kms:GenerateDataKey", "kms:Decrypt"}
    assert all(actions <= {"logs:CreateLogStream", "logs:PutLogEvents"} for actions in rest.values())


def test_outputs_name_each_image_in_the_trainer_repository_by_tag_and_digest(dev):
    """`ops submit`, `ops data` and `ops model download` read these to default --image (ops/images.py)."""
    from config.outputs import trainer_image_output

    outputs = dev.templates["registry"].find_outputs("*")
    copies = {c["Properties"]["Tag"]: logical_id for logical_id, c in _copies(dev).items()}
    for variant, asset in dev.stage.registry.trainer_images.items():
        parts = outputs[trainer_image_output(variant)]["Value"]["Fn::Join"][1]
        text = json.dumps(parts)
        assert f":{asset.image_tag}@" in text and "container-assets" not in text
        assert parts[-1] == {"Fn::GetAtt": [copies[asset.image_tag], "ImageDigest"]}
        # The deployed jobs run the same copy, by its immutable tag (the digest is known only at deploy).
        assert dev.stage.workloads.charts.values.trainer_images[variant] == dev.stage.registry.trainer_image_uris[variant]
