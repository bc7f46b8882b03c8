"""The shared Kubernetes facts hold where they are used outside Python: the trainer images'
Dockerfiles, and the Kubernetes name rules a run's name must meet."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from config.kubernetes import JOB_NAME_PATTERN, MAX_JOB_NAME, TRAINER_UID

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAINER_DOCKERFILES = ("Dockerfile", "Dockerfile.cpu")


@pytest.mark.parametrize("dockerfile", TRAINER_DOCKERFILES)
def test_the_trainer_images_create_own_their_files_as_and_run_as_the_trainer_uid(dockerfile):
    """The pods of the trainer image run as TRAINER_UID (runAsUser): an image whose user differed
    would start as a uid that owns neither /app nor a home directory."""
    text = (REPO_ROOT / "trainer" / dockerfile).read_text()
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    created = re.findall(r"useradd\b[^\n]*--uid\s+(\d+)", text)
    owners = re.findall(r"--chown=(\S+)", text)
    assert users and created and owners, dockerfile
    assert users[-1] == str(TRAINER_UID), dockerfile
    assert created == [str(TRAINER_UID)], dockerfile
    assert set(owners) == {f"{TRAINER_UID}:{TRAINER_UID}"}, dockerfile


@pytest.mark.parametrize("name, accepted", [
    ("a", True), ("run-7", True), ("a" * MAX_JOB_NAME, True), ("a" * (MAX_JOB_NAME + 1), False),
    ("7run", False), ("-run", False), ("run-", False), ("Run", False), ("llama3.1", False), ("", False),
    ("run\n", False),
])
def test_a_job_name_is_a_dns_label_of_at_most_max_job_name_characters(name, accepted):
    """Its pods are <job>-worker-<index>, a DNS-1035 label of at most 63 characters: lowercase
    letters, digits and '-', starting with a letter and ending with a letter or digit."""
    assert bool(JOB_NAME_PATTERN.fullmatch(name)) is accepted
    assert MAX_JOB_NAME + len("-worker-") + len("9999") <= 63
