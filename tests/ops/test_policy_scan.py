"""ops.policy_scan: checkov over an environment's templates and dist/ YAML, every failure justified
in checkov-accepted.yaml, the counts within issue 21's starting figures. The real checkov runs
(from .venv-checkov, which `make test` installs) over a real synth of dev."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ops import policy_scan
from ops.policy_scan import Acceptance, Failure

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "stacks"))
from synth_helpers import synth  # noqa: E402

needs_checkov = pytest.mark.skipif(not policy_scan.CHECKOV.is_file(),
                                   reason="checkov is installed by `make test` into .venv-checkov")


def failure(check="CKV_AWS_115", resource="AWS::Lambda::Function.HandlerABCDEF12", framework="cloudformation"):
    return Failure(framework, check, resource, "x.template.json", "name")


def test_an_acceptance_names_the_check_and_a_resource_pattern():
    accepted = Acceptance("CKV_AWS_115", "AWS::Lambda::Function.Handler*", "why")
    assert accepted.accepts(failure())
    assert not accepted.accepts(failure(check="CKV_AWS_116"))
    assert not accepted.accepts(failure(resource="AWS::Lambda::Function.OtherABCDEF12"))


def test_the_verdict_refuses_unaccepted_failures_and_counts_over_the_limit():
    failures = [failure(), failure(check="CKV_AWS_116"), failure("CKV_K8S_99", "Pod.x", "kubernetes")]
    verdict = policy_scan.judge(failures, {"cloudformation": 1, "kubernetes": 5},
                                [Acceptance("CKV_AWS_115", "*", "why"), Acceptance("CKV_K8S_8", "*", "stale")])
    assert verdict.unaccepted == [failures[1], failures[2]]
    assert verdict.over_limit == {"cloudformation": (2, 1)}
    assert [a.check for a in verdict.unused] == ["CKV_K8S_8"]
    assert not verdict.ok


def test_checkov_reports_of_several_documents_parse():
    doc = {"check_type": "kubernetes", "results": {"failed_checks": [
        {"check_id": "CKV_K8S_8", "resource": "DaemonSet.a.b", "file_path": "/00-x.yaml", "check_name": "probe"}]}}
    text = json.dumps(doc) + "\n" + json.dumps([doc, {"check_type": "cloudformation", "results": {}}])
    assert [f.resource for f in policy_scan.parse_report(text, "kubernetes")] == ["DaemonSet.a.b"] * 2


def test_every_acceptance_gives_a_reason():
    limits, accepted = policy_scan.load_acceptances()
    assert set(limits) == {"cloudformation", "kubernetes"}
    assert accepted and all(len(a.reason) >= 60 for a in accepted)


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    """dev's cloud assembly and its dist/ YAML, as `make synth` writes them."""
    from k8s.sinks import write_dist

    dev = synth("dev")
    dist = tmp_path_factory.mktemp("dist")
    write_dist(dev.stage.workloads.charts, dist / "dev")
    return dev.outdir, dist


@needs_checkov
def test_every_checkov_failure_of_dev_is_accepted_and_within_the_limits(synthesized):
    outdir, dist = synthesized
    verdict = policy_scan.scan("dev", outdir=outdir, dist=dist)
    assert [f.line() for f in verdict.unaccepted] == [] and verdict.over_limit == {}
    counts = {fw: sum(1 for f in verdict.failures if f.framework == fw) for fw in policy_scan.FRAMEWORKS}
    assert counts["cloudformation"] > 0 and counts["kubernetes"] > 0  # checkov did look


@needs_checkov
def test_a_new_unjustified_failure_fails_the_scan_naming_it(synthesized, tmp_path):
    outdir, dist = synthesized
    assembly = tmp_path / "cdk.out" / "assembly-dev"
    shutil.copytree(outdir / "assembly-dev", assembly)
    (assembly / "Extra.template.json").write_text(json.dumps({"Resources": {"Plain": {
        "Type": "AWS::Logs::LogGroup", "Properties": {"RetentionInDays": 30}}}}))
    result = subprocess.run([sys.executable, "-m", "ops.policy_scan", "--env", "dev", "--outdir",
                             str(tmp_path / "cdk.out"), "--dist", str(dist)],
                            capture_output=True, text=True, timeout=300, cwd=policy_scan.REPO_ROOT)
    assert result.returncode == 1
    assert "  not accepted: CKV_AWS_158 AWS::Logs::LogGroup.Plain (cloudformation, Extra.template.json)" in \
        result.stdout


def test_nothing_synthesized_is_one_line_and_exit_2(tmp_path):
    result = subprocess.run([sys.executable, "-m", "ops.policy_scan", "--env", "dev", "--outdir", str(tmp_path),
                             "--dist", str(tmp_path), "--checkov", sys.executable],
                            capture_output=True, text=True, timeout=60, cwd=policy_scan.REPO_ROOT)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [f"error: {tmp_path / 'assembly-dev'}: not found; run `make synth ENV=dev` first"]
