"""Runs on a capacity-block group end cleanly (k8s/pods/capacity_block_stop.py): when the CronJob fires,
what its script does in a real shell (fake `date` and `kubectl` on PATH), and that its Role allows
exactly the calls the script makes. EKS fact: "Amazon EKS will setup a scheduled scale down on the
node group 40 minutes prior to their reservation end"
(https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html)."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import kubernetes_validate
import pytest

from config import load_environment
from k8s.pods.capacity_block_stop import (
    SUSPEND_PATCH, TRAINJOB_SUSPEND_PATCH, WORKLOAD_DEACTIVATE_PATCH, cronjob_name, group_grace_s, stop_at,
    stop_cronjob, stop_script,
)
from k8s_walk import raw_environments

END = datetime(2026, 12, 3, 11, 30, tzinfo=timezone.utc)
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
BLOCK = "cr-0fedcba9876543210"


@pytest.fixture(scope="module")
def env():
    """dev with its p5 group on a capacity block."""
    raw = copy.deepcopy(raw_environments()["dev"])
    for group in raw["gpuNodegroups"]:
        if group["name"] == "p5":
            group["capacity"] = {"type": "capacityBlock", "reservationId": BLOCK}
    return load_environment({"dev": raw}, "dev")


def test_without_a_long_save_runs_stop_45_minutes_before_the_end():
    assert stop_at(END, 0) == END - timedelta(minutes=45)
    assert stop_at(END, 240) == END - timedelta(minutes=45)  # 4 min save + 1 min margin still ends by T-40


def test_a_long_save_moves_the_stop_earlier_so_it_ends_before_the_eks_drain(env):
    grace = group_grace_s(env, "p5")
    assert grace > 5 * 60, "dev's p5 presets save for longer than T-45 allows"
    stop = stop_at(END, grace)
    assert stop + timedelta(seconds=grace) <= END - timedelta(minutes=40) - timedelta(seconds=60)
    assert stop.second == 0 and END - stop < timedelta(minutes=45) + timedelta(seconds=grace) + timedelta(minutes=2)


def test_the_cronjob_fires_once_at_the_stop_minute_in_utc_and_gives_up_before_ec2_shuts_down(env):
    job = stop_cronjob(env, "p5", reservation_id=BLOCK, end=END, image="kubectl:1", now=NOW)
    stop = stop_at(END, group_grace_s(env, "p5"))
    spec = job["spec"]
    assert spec["schedule"] == f"{stop.minute} {stop.hour} 3 12 *"
    assert spec["timeZone"] == "Etc/UTC" and spec["concurrencyPolicy"] == "Forbid"
    assert stop + timedelta(seconds=spec["startingDeadlineSeconds"]) == END - timedelta(minutes=31)
    assert job["metadata"]["name"] == cronjob_name("p5") == "capacity-block-stop-p5"
    pod = spec["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "capacity-block-stop" and pod["automountServiceAccountToken"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    env_vars = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env_vars == {"GROUP": "p5", "CRONJOB": "capacity-block-stop-p5", "RESERVATION": BLOCK,
                        "STOP_AT": str(int(stop.timestamp())), "BLOCK_END": str(int(END.timestamp()))}


@pytest.mark.parametrize("version", ["1.34", "1.35", "1.36"])
def test_the_cronjob_is_strict_valid(env, version):
    kubernetes_validate.validate(stop_cronjob(env, "p5", reservation_id=BLOCK, end=END, image="k:1", now=NOW),
                                 version, strict=True)


def test_the_suspend_patch_is_the_one_ops_stop_sends():
    """`ops stop` suspends through runPolicy.suspend (ops/kube.py set_suspended): the operator deletes
    the pods, each rank saves on SIGTERM and the run is left Suspended, resumable, never Succeeded."""
    assert json.loads(SUSPEND_PATCH) == {"spec": {"runPolicy": {"suspend": True}}}


# --- the script, in a real shell ---------------------------------------------------------------

RUNS = "\n".join([
    "llama-a\tp5\tRunning",        # on the block: stopped
    "llama-b\tp5\tSucceeded",      # finished: left alone
    "resnet\tp4d\tRunning",        # another group: left alone
    "llama-c\tp5\t",               # created, no condition yet: stopped
])


def run_script(tmp_path: Path, now: int, stop: int, end: int) -> list[list[str]]:
    return run_stop_script(tmp_path, stop_script(), {"pytorchjobs": RUNS + "\n"}, now=now, stop=stop, end=end)


def run_stop_script(tmp_path: Path, script: str, lists: dict[str, str], *, now: int, stop: int = 900,
                    end: int = 5000) -> list[list[str]]:
    """`script` in a real shell with a fake `date` (now) and `kubectl`, which logs its arguments and
    answers `get RESOURCE` with lists[RESOURCE]; returns the kubectl calls, split into words."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "kubectl.log"
    for resource, text in lists.items():
        (tmp_path / f"{resource}.out").write_text(text)
    (bin_dir / "date").write_text(f"#!/bin/sh\necho {now}\n")
    (bin_dir / "kubectl").write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$*" >> {log}\n'
        f'if [ "$1" = get ]; then cat {tmp_path}/$2.out; fi\n')
    for tool in ("date", "kubectl"):
        (bin_dir / tool).chmod(0o755)
    environ = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "GROUP": "p5", "CRONJOB": "capacity-block-stop-p5",
               "RESERVATION": BLOCK, "STOP_AT": str(stop), "BLOCK_END": str(end)}
    done = subprocess.run(["/bin/sh", "-c", script], env=environ, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return [line.split(" ") for line in log.read_text().splitlines()] if log.exists() else []


def test_inside_the_window_the_script_suspends_the_groups_unfinished_runs_and_deletes_its_cronjob(tmp_path):
    calls = run_script(tmp_path, now=1000, stop=900, end=5000)
    verbs = [(c[0], c[1], c[2]) for c in calls]
    assert verbs == [
        ("get", "pytorchjobs", "-n"),
        ("annotate", "pytorchjob", "llama-a"), ("patch", "pytorchjob", "llama-a"),
        ("annotate", "pytorchjob", "llama-c"), ("patch", "pytorchjob", "llama-c"),
        ("delete", "cronjob", "capacity-block-stop-p5"),
    ]
    patch = next(c for c in calls if c[0] == "patch")
    assert patch[-1] == SUSPEND_PATCH
    annotate = next(c for c in calls if c[0] == "annotate")
    assert " ".join(annotate).endswith(f"eks-distributed-training.io/stopped-by=capacity-block {BLOCK} ends 5000")


@pytest.mark.parametrize("now", [899, 5000, 5001 + 365 * 86400], ids=["before", "at-end", "a-year-later"])
def test_outside_the_window_the_script_touches_nothing(tmp_path, now):
    assert run_script(tmp_path, now=now, stop=900, end=5000) == []


# --- RBAC: exactly what the script calls -------------------------------------------------------

# kubectl's requests per command: get -o jsonpath lists; annotate and patch read the object, then
# patch it; delete by name deletes.
KUBECTL_REQUESTS = {"get": ("list",), "annotate": ("get", "patch"), "patch": ("get", "patch"), "delete": ("delete",)}
RESOURCES = {"pytorchjobs": ("kubeflow.org", "pytorchjobs"), "pytorchjob": ("kubeflow.org", "pytorchjobs"),
             "cronjob": ("batch", "cronjobs"),
             "trainingruntimes": ("trainer.kubeflow.org", "trainingruntimes"),
             "trainjobs": ("trainer.kubeflow.org", "trainjobs"), "trainjob": ("trainer.kubeflow.org", "trainjobs"),
             "workloads": ("kueue.x-k8s.io", "workloads"), "workload": ("kueue.x-k8s.io", "workloads")}


@pytest.mark.parametrize("api,queueing", [("v1", "none"), ("v2", "none"), ("v2", "kueue")])
def test_the_role_allows_exactly_the_calls_the_script_makes(env, tmp_path, api, queueing):
    from k8s.addons.capacity_block_stop import stop_rules

    config = dataclasses.replace(env, training_api=api, queueing=queueing)
    calls = run_script(tmp_path, now=1000, stop=900, end=5000) if api == "v1" else \
        run_v2_script(tmp_path, kueue=queueing == "kueue")
    needed = {(RESOURCES[c[1]], verb) for c in calls for verb in KUBECTL_REQUESTS[c[0]]}
    granted = {((g, r), v) for rule in stop_rules(config) for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    assert needed == granted
    [cron_rule] = [r for r in stop_rules(config) if r["resources"] == ["cronjobs"]]
    assert cron_rule["resourceNames"] == ["capacity-block-stop-p5"]


# --- trainingApi v2: TrainJobs, and under Kueue their Workloads --------------------------------------

V2_LISTS = {
    # name, node group of its runtime's node job
    "trainingruntimes": ["llama-a\tp5", "llama-b\tp5", "resnet\tp4d", "llama-c\tp5", "llama-d\tp5"],
    # name, runtime, its true condition types (Trainer v2.3.0: Suspended, Complete, Failed)
    "trainjobs": ["llama-a\tllama-a\t", "llama-b\tllama-b\tComplete", "resnet\tresnet\t",
                  "llama-c\tllama-c\tSuspended", "llama-d\tllama-d\tFailed"],
    # owner, Workload (llama-c's not created yet)
    "workloads": ["TrainJob/llama-a\ttrainjob-llama-a-5f2c1", "TrainJob/resnet\ttrainjob-resnet-9d0e2"],
}


def run_v2_script(tmp_path: Path, *, kueue: bool, now: int = 1000) -> list[list[str]]:
    lists = {resource: "".join(f"{line}\n" for line in lines) for resource, lines in V2_LISTS.items()}
    return run_stop_script(tmp_path, stop_script("v2", "kueue" if kueue else "none"), lists, now=now)


def test_under_v2_the_script_suspends_the_groups_unfinished_trainjobs(tmp_path):
    calls = run_v2_script(tmp_path, kueue=False)
    assert [(c[0], c[1], c[2]) for c in calls] == [
        ("get", "trainingruntimes", "-n"), ("get", "trainjobs", "-n"),
        ("annotate", "trainjob", "llama-a"), ("patch", "trainjob", "llama-a"),
        ("annotate", "trainjob", "llama-c"), ("patch", "trainjob", "llama-c"),
        ("delete", "cronjob", "capacity-block-stop-p5"),
    ]
    assert {c[-1] for c in calls if c[0] == "patch"} == {TRAINJOB_SUSPEND_PATCH}
    assert json.loads(TRAINJOB_SUSPEND_PATCH) == {"spec": {"suspend": True}}  # what `ops stop` sends


def test_under_kueue_the_script_deactivates_workloads_and_never_patches_a_trainjob(tmp_path):
    """Kueue owns a queued TrainJob's spec.suspend (it unsuspends an admitted one); a run whose
    Workload does not exist yet is left alone rather than suspended behind Kueue's back."""
    calls = run_v2_script(tmp_path, kueue=True)
    assert [(c[0], c[1], c[2]) for c in calls] == [
        ("get", "trainingruntimes", "-n"), ("get", "trainjobs", "-n"), ("get", "workloads", "-n"),
        ("annotate", "trainjob", "llama-a"), ("patch", "workload", "trainjob-llama-a-5f2c1"),
        ("delete", "cronjob", "capacity-block-stop-p5"),
    ]
    [patch] = [c for c in calls if c[0] == "patch"]
    assert json.loads(patch[-1]) == json.loads(WORKLOAD_DEACTIVATE_PATCH) == {"spec": {"active": False}}


def test_outside_the_window_the_v2_script_touches_nothing(tmp_path):
    assert run_v2_script(tmp_path, kueue=True, now=5000) == []


def test_a_v2_environments_cronjob_runs_the_trainjob_script(env):
    v2 = dataclasses.replace(env, training_api="v2", queueing="kueue")
    job = stop_cronjob(v2, "p5", reservation_id=BLOCK, end=END, image="k:1", now=NOW)
    command = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command == ["/bin/sh", "-c", stop_script("v2", "kueue")]
    kubernetes_validate.validate(job, "1.34", strict=True)
