"""The NCCL test's MPI launcher waits for its workers before mpirun execs into them.

v1.9.4's kubectl-delivery init container only copies kubectl; the old mpioperator image also
waited for every worker to be Running. The script is run here for real with bash, with the
operator's kubectl, hostfile and mpirun replaced by recording stand-ins."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from k8s.pods.validation import MPI_HOSTFILE, MPI_KUBECTL, MPIRUN, WORKER_WAIT, nccl_groups, nccl_launcher_script


def _stand_in(path: Path, body: str) -> str:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)
    return str(path)


def run_launcher(dev, tmp_path, *, wait_exit: int, mpirun_exit: int = 0) -> tuple[subprocess.CompletedProcess, list[str]]:
    group = nccl_groups(dev)[0]
    calls = tmp_path / "calls"
    hostfile = tmp_path / "hostfile"
    # What the operator writes (pkg/controller.v1/mpi: newConfigMap), slots = GPUs per node.
    hostfile.write_text(f"job-worker-0 slots={group.instance_type.gpus}\njob-worker-1 slots={group.instance_type.gpus}\n")
    kubectl = _stand_in(tmp_path / "kubectl", f'echo "kubectl $*" >> {calls}\nexit {wait_exit}\n')
    mpirun = _stand_in(tmp_path / "mpirun", f'echo "mpirun" >> {calls}\necho "# Avg bus bandwidth    : 0.5"\n'
                                             f'exit {mpirun_exit}\n')
    script = (nccl_launcher_script(group).replace(MPI_KUBECTL, kubectl).replace(MPI_HOSTFILE, str(hostfile))
              .replace(MPIRUN, mpirun))
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env={**os.environ}, timeout=60)
    return result, calls.read_text().splitlines() if calls.exists() else []


def test_launcher_waits_for_every_worker_in_the_hostfile_before_mpirun(dev, tmp_path):
    result, calls = run_launcher(dev, tmp_path, wait_exit=0)
    assert result.returncode == 0, result.stderr
    assert calls == [f"kubectl wait --for=condition=Ready --timeout={WORKER_WAIT} pod/job-worker-0 pod/job-worker-1",
                     "mpirun"]


def test_launcher_fails_without_running_mpirun_when_workers_never_become_ready(dev, tmp_path):
    result, calls = run_launcher(dev, tmp_path, wait_exit=1)
    assert result.returncode != 0
    assert calls and calls[-1].startswith("kubectl wait") and "mpirun" not in calls
    assert "workers not Ready" in result.stderr


@pytest.mark.parametrize("mpirun_exit", [0, 1])
def test_launcher_exits_as_all_reduce_perf_does_and_leaves_the_verdict_to_ops(dev, tmp_path, mpirun_exit):
    """A low bus bandwidth is not the launcher's call (ops/nccl.py judges the table); a test that
    broke (mpirun non-zero, e.g. nccl-tests' own wrong-data exit) fails the MPIJob."""
    result, calls = run_launcher(dev, tmp_path, wait_exit=0, mpirun_exit=mpirun_exit)
    assert calls[-1] == "mpirun"
    assert result.returncode == mpirun_exit, result.stderr


def test_the_kubectl_delivery_image_keeps_the_operators_contract_with_a_verified_kubectl(tmp_path):
    """v1.9.4 adds the image as the launcher's init container without a command (mpijob_controller.go
    newLauncher): its ENTRYPOINT and CMD must copy kubectl into TARGET_DIR (/opt/kube), where
    kubexec.sh and our launcher script run it; the binary is checked against the pinned digest."""
    import json
    import re

    dockerfile = (Path(__file__).resolve().parents[3] / "k8s" / "images" / "kubectl-delivery" / "Dockerfile").read_text()
    bases = re.findall(r"^FROM (\S+)", dockerfile, flags=re.M)
    assert bases and all(re.fullmatch(r"alpine:3\.\d+\.\d+@sha256:[0-9a-f]{64}", b) for b in bases)
    assert "ARG KUBECTL_VERSION" in dockerfile and "ARG KUBECTL_SHA256" in dockerfile
    assert 'echo "${KUBECTL_SHA256}  /kubectl" | sha256sum -c -' in dockerfile
    assert "https://dl.k8s.io/release/${KUBECTL_VERSION}/bin/linux/amd64/kubectl" in dockerfile
    [entrypoint] = re.findall(r"^ENTRYPOINT (.+)$", dockerfile, flags=re.M)
    [cmd] = re.findall(r"^CMD (.+)$", dockerfile, flags=re.M)
    assert json.loads(entrypoint) == ["/bin/sh", "-c"]
    [copy] = json.loads(cmd)
    assert copy == 'cp /usr/local/bin/kubectl "${TARGET_DIR:-/opt/kube}/kubectl"'
    assert MPI_KUBECTL == "/opt/kube/kubectl"
    # The command as the init container runs it, with the TARGET_DIR the operator sets.
    kubectl = _stand_in(tmp_path / "kubectl", "echo v1.35.2\n")
    target = tmp_path / "opt-kube"
    target.mkdir()
    done = subprocess.run(["sh", "-c", copy.replace("/usr/local/bin/kubectl", kubectl)],
                          env={**os.environ, "TARGET_DIR": str(target)}, capture_output=True, timeout=30)
    assert done.returncode == 0 and (target / "kubectl").read_text() == Path(kubectl).read_text()
