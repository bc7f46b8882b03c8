"""Helpers the k8s tests share: build an environment's charts, walk pod templates and containers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import cdk8s

from config import Environment
from config.kubernetes import NODEGROUP_LABEL
from k8s.charts import EnvironmentCharts
from k8s.addons import ClusterValues

REPO_ROOT = Path(__file__).resolve().parents[2]


def raw_environments() -> dict:
    return json.loads((REPO_ROOT / "cdk.json").read_text())["context"]["environments"]


ENV_NAMES = sorted(raw_environments())


def build(config: Environment) -> EnvironmentCharts:
    return EnvironmentCharts(config, ClusterValues.placeholders(), app=cdk8s.App())


def objects(charts: EnvironmentCharts) -> list[dict]:
    return [obj for docs in charts.manifests().values() for obj in docs]


def ops_objects(config: Environment) -> list[dict]:
    """What `ops` creates on the cluster, never a deploy: each preset's run as `ops start` renders it
    (images as dist placeholders), the validation objects `ops validate` creates with the NCCL
    sweep's first pair pinned from each group's template, `ops data`'s Job per data source and
    `ops model download`'s Jobs."""
    from k8s.pods.data_job import data_job_manifest
    from k8s.pods.pytorchjob import presets_for, render_run
    from k8s.pods.model_download import ModelDownload, model_download_manifest
    from k8s.pods.validation import validation_objects
    from k8s.pods.images import image_placeholder
    from ops import nccl

    made = [render_run(config, p.name, image=f"${{{image_placeholder(p.image_variant)}}}") for p in presets_for(config)]
    checks = validation_objects(config)
    made += checks
    for template in (o for o in checks if o["kind"] == "MPIJob"):
        group = template["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"][NODEGROUP_LABEL]
        made.append(nccl.pinned(template, (f"{group}-node-a", f"{group}-node-b"), 0, group))
    made += [data_job_manifest(config, source, image=f"${{{image_placeholder('cpu')}}}") for source in config.data_sources]
    if config.cpu_nodegroups:
        # The model llama2-7b-finetune starts from (/fsx/models/Llama-2-7b-hf).
        download = ModelDownload.of("meta-llama/Llama-2-7b-hf")
        made.append(model_download_manifest(config, download, image=f"${{{image_placeholder('cpu')}}}"))
    return made


def key(obj: dict) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def pod_specs(obj: dict) -> Iterator[tuple[str, dict]]:
    """(where, pod spec) for every pod template an object carries."""
    kind, spec = obj["kind"], obj.get("spec", {})
    name = f"{kind}/{obj['metadata']['name']}"
    if kind in ("Deployment", "DaemonSet", "StatefulSet", "Job", "ReplicaSet"):
        yield name, spec["template"]["spec"]
    elif kind == "Pod":
        yield name, spec
    elif kind in ("PyTorchJob", "MPIJob"):
        replicas = spec.get("pytorchReplicaSpecs") or spec.get("mpiReplicaSpecs")
        for role, replica in replicas.items():
            yield f"{name}/{role}", replica["template"]["spec"]


def containers(pod_spec: dict) -> list[dict]:
    return pod_spec.get("initContainers", []) + pod_spec.get("containers", [])


def target_nodegroups(pod_spec: dict) -> list[str]:
    """Node groups a pod spec is pinned to, by nodeSelector or required node affinity."""
    if NODEGROUP_LABEL in pod_spec.get("nodeSelector", {}):
        return [pod_spec["nodeSelector"][NODEGROUP_LABEL]]
    required = pod_spec.get("affinity", {}).get("nodeAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", {})
    groups: list[str] = []
    for term in required.get("nodeSelectorTerms", []):
        for expr in term.get("matchExpressions", []):
            if expr["key"] == NODEGROUP_LABEL and expr["operator"] == "In":
                groups += expr["values"]
    return groups


def size(obj) -> int:
    return len(json.dumps(obj, separators=(",", ":")))


def embedded_size(obj) -> int:
    """Bytes the object takes as the KubernetesManifest's `Manifest` property: a JSON string inside
    the template and the kubectl Lambda's event, so every quote is escaped once more."""
    return len(json.dumps(json.dumps(obj, separators=(",", ":"))))


def one(docs: list[dict], kind: str) -> dict:
    """The one object of `kind` among `docs`."""
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{kind}: {len(found)}"
    return found[0]


def pod(doc: dict) -> dict:
    """A workload's pod spec."""
    return doc["spec"]["template"]["spec"]


def closed(schema):
    """The schema as the API server's strict field validation applies it: every object schema that
    lists properties and does not preserve unknown fields rejects unknown ones."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed(v) for k, v in schema.items()}
    if ("properties" in out and not out.get("x-kubernetes-preserve-unknown-fields")
            and "additionalProperties" not in out):
        out["additionalProperties"] = False
    return out
