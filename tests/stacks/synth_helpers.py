"""Build test environments from cdk.json and synthesize each one once per test session.

A synth costs ~10 s here, so every module asks `synth(name)` and gets the cached stage.
Variants are cdk.json's environments with a few keys replaced, parsed by config/ like any other.
"""

from __future__ import annotations

import copy
import functools
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk.assertions import Template

from config import Environment
from config.environment_parser import parse_environment

REPO_ROOT = Path(__file__).resolve().parents[2]
CDK_JSON = json.loads((REPO_ROOT / "cdk.json").read_text())
CONTEXT = CDK_JSON["context"]
RESERVATION = "cr-0123456789abcdef0"
BLOCK = "cr-0fedcba9876543210"
FINAL_BACKUP = "backup-0123456789abcdef0"
# Test data for version pins (the shipped environments pin none and take EKS's default).
DEPLOYER = "arn:aws:iam::111111111111:role/ci/Deployer"
ADDON_PINS = {"vpc-cni": "v1.20.4-eksbuild.1", "eks-node-monitoring-agent": "v1.7.0-eksbuild.1"}


def raw_environment(name: str) -> dict[str, Any]:
    return copy.deepcopy(CONTEXT["environments"][name])


def _blocks() -> dict[str, Any]:
    """dev with every capacity type and EFA layout, repair off on one group, kept (retain) and with
    no S3 link."""
    raw = raw_environment("dev")
    raw["gpuNodegroups"] = [
        {"name": "p5-block", "instanceType": "p5.48xlarge", "minSize": 0, "maxSize": 2, "desiredSize": 0,
         "capacity": {"type": "capacityBlock", "reservationId": BLOCK}},
        {"name": "p5en-odcr", "instanceType": "p5en.48xlarge", "minSize": 0, "maxSize": 2, "desiredSize": 0,
         "capacity": {"type": "reserved", "reservationId": RESERVATION}},
        {"name": "p4d", "instanceType": "p4d.24xlarge", "minSize": 0, "maxSize": 2, "desiredSize": 0},
        {"name": "g5", "instanceType": "g5.xlarge", "minSize": 0, "maxSize": 2, "desiredSize": 1,
         "nodeAutoRepair": False},
    ]
    raw["removalPolicy"] = "retain"
    raw["endpointAccess"] = {"type": "private"}
    return raw


def _split() -> dict[str, Any]:
    """dev, smallest cluster, importing from one S3 prefix and exporting to another; opted into
    extended Kubernetes support, with two add-ons pinned; administered by its deployer alone."""
    raw = raw_environment("dev")
    raw["adminRoleArns"] = []
    raw["deployerPrincipalArn"] = DEPLOYER
    raw["upgradePolicy"] = "extended"
    raw["addonVersions"] = dict(ADDON_PINS)
    raw["gpuNodegroups"] = []
    raw["cpuNodegroups"] = []
    raw.pop("dataSources")  # the data Job needs a CPU group
    raw["fsx"] = {"storageCapacityGiB": 2400, "throughputPerTiB": 125,
                  "s3ImportPath": "s3://example-data/in", "s3ExportPath": "s3://example-results/out"}
    return raw


def _linked() -> dict[str, Any]:
    """prod (retain) reading from and writing back to one S3 prefix."""
    raw = raw_environment("prod")
    raw["fsx"] = {**raw["fsx"], "s3ImportPath": "s3://example-training-data/corpus",
                  "s3ExportPath": "s3://example-training-data/corpus"}
    # One source FSx shows through the link (nothing to copy), one whole bucket it copies.
    raw["dataSources"] = {
        "c4": {"s3Uri": "s3://example-training-data/corpus/c4/", "prepare": "tokens", "tokenizer": "/fsx/models/m",
               "fsxPath": "/fsx/data/tokens"},
        "archive": {"s3Uri": "s3://example-archive-bucket"}}
    return raw


def _restored() -> dict[str, Any]:
    """prod deployed again after a destroy, its file system created from the kept one's final backup."""
    raw = raw_environment("prod")
    raw["fsx"] = {**raw["fsx"], "backupId": FINAL_BACKUP}
    return raw


def _trainer_v2() -> dict[str, Any]:
    """dev running its presets on Kubeflow Trainer v2 (TrainJob on JobSet) instead of PyTorchJob."""
    raw = raw_environment("dev")
    raw["trainingApi"] = "v2"
    return raw


def _kueue() -> dict[str, Any]:
    """trainerv2 with its runs queued by Kueue, and p5's EFA and GPUs from the DRA drivers (the claim
    mappings, the node labels)."""
    raw = _trainer_v2()
    raw["queueing"] = "kueue"
    for group in raw["gpuNodegroups"]:
        if group["name"] == "p5":
            group["efaAllocation"] = "dra"
            group["gpuAllocation"] = "dra"
    return raw


VARIANTS = {
    "dev": lambda: raw_environment("dev"),
    "prod": lambda: raw_environment("prod"),
    "blocks": _blocks,
    "split": _split,
    "linked": _linked,
    "restored": _restored,
    "trainerv2": _trainer_v2,
    "kueue": _kueue,
}


def environment(variant: str) -> Environment:
    # The stage id (and so the stack names) is the environment's name, as app.py does it.
    return parse_environment(variant, VARIANTS[variant]())


@dataclass
class Synth:
    config: Environment
    stage: Any  # stacks.stage.TrainingClusterStage
    outdir: Path
    assembly: cdk.cx_api.CloudAssembly

    @functools.cached_property
    def templates(self) -> dict[str, Template]:
        names = ("network", "cluster", "storage", "registry", "validation")
        return {name: Template.from_stack(getattr(self.stage, name)) for name in names if hasattr(self.stage, name)}

    def template_json(self, name: str) -> dict:
        return self.templates[name].to_json()

    def template_files(self) -> list[Path]:
        return sorted(self.outdir.glob("**/*.template.json"))

    def logical_id(self, stack_name: str, construct) -> str:
        stack = getattr(self.stage, stack_name)
        return stack.get_logical_id(construct.node.default_child)

    def exported_value(self, value: Any) -> Any:
        """What an `Fn::ImportValue` imports: the exporting output's value; None if `value` is no import."""
        if not isinstance(value, dict) or "Fn::ImportValue" not in value:
            return None
        export = value["Fn::ImportValue"]
        for name in self.templates:
            for output in self.template_json(name).get("Outputs", {}).values():
                if output.get("Export", {}).get("Name") == export:
                    return output["Value"]
        return None

    def imported_ref(self, value: Any) -> str | None:
        """The logical id an `Fn::ImportValue` points at, followed through the exporting stack."""
        ref = self.exported_value(value)
        if ref is None:
            return None
        return ref.get("Ref") or ref.get("Fn::GetAtt", [None])[0]


@functools.lru_cache(maxsize=None)
def synth(variant: str) -> Synth:
    return synthesize(variant, VARIANTS[variant]())


def synthesize(name: str, raw: dict[str, Any]) -> Synth:
    """One uncached synth of environment `raw` as stage `name` (each costs ~10 s: cache it per module)."""
    from stacks.stage import TrainingClusterStage

    config = parse_environment(name, raw)
    outdir = Path(tempfile.mkdtemp(prefix=f"synth-{name}-"))
    flags = {k: v for k, v in CONTEXT.items() if k.startswith("@")}
    app = cdk.App(outdir=str(outdir), context=flags)
    stage = TrainingClusterStage(app, name, config=config)
    assembly = app.synth()
    return Synth(config, stage, outdir, assembly)


def resources(template: Template, type_: str) -> dict[str, dict]:
    return template.find_resources(type_)


def only(mapping: dict) -> Any:
    assert len(mapping) == 1, f"expected exactly one, got {sorted(mapping)}"
    return next(iter(mapping.values()))
