"""app.py as the CDK CLI runs it: a bad configuration stops with one line, exit code != 0, no template."""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
CONTEXT = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
# jsii's Node-version banners go to stderr; since Node 20's end of life (2026-10-30) the second
# variable is the one that silences it (the first only covers the earlier "deprecated" notice).
JSII_QUIET = {"JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1", "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}


def run_app(tmp_path: Path, context: dict) -> subprocess.CompletedProcess:
    """Run app.py the way `cdk synth` does: context in CDK_CONTEXT_JSON, output in CDK_OUTDIR."""
    outdir = tmp_path / "cdk.out"
    outdir.mkdir()
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps(context), "CDK_OUTDIR": str(outdir), **JSII_QUIET}
    return subprocess.run([sys.executable, "app.py"], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def broken(env: str, key: str, value) -> dict:
    context = copy.deepcopy(CONTEXT)
    context["environments"][env][key] = value
    context["env"] = env
    return context


def assert_stopped_with_one_line(result, tmp_path: Path, prefix: str) -> str:
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(prefix), lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    assert not list((tmp_path / "cdk.out").glob("**/*.template.json"))
    return lines[0]


@pytest.mark.parametrize("key, value, field", [
    ("account", "12345", "account"),
    ("vpcCidr", "10.0.0.0/8", "vpcCidr"),
    ("removalPolicy", "keep", "removalPolicy"),
])
def test_bad_config_value_exits_nonzero_with_one_line_and_writes_nothing(tmp_path, key, value, field):
    result = run_app(tmp_path, broken("dev", key, value))
    line = assert_stopped_with_one_line(result, tmp_path, "config error: environments.dev.")
    assert line.startswith(f"config error: environments.dev.{field}: ")


def test_unknown_key_is_not_ignored(tmp_path):
    result = run_app(tmp_path, broken("dev", "gpuNodeGroups", []))
    line = assert_stopped_with_one_line(result, tmp_path, "config error: environments.dev.")
    assert "gpuNodeGroups: unknown key" in line


def test_unknown_environment_name_exits_nonzero_with_one_line(tmp_path):
    context = {**copy.deepcopy(CONTEXT), "env": "staging"}
    result = run_app(tmp_path, context)
    line = assert_stopped_with_one_line(result, tmp_path, "config error: environments.staging")
    assert line == "config error: environments.staging: unknown environment; defined environments are dev, prod"


def test_a_cdk_json_that_repeats_an_environment_stops_a_bare_synth(tmp_path):
    """The CDK CLI parses cdk.json with JSON.parse, which keeps the last of two equal keys, and hands
    the app only what is left: a second "dev" pasted below the first would deploy it in place of the
    first without a word. The app reads the cdk.json of the folder the CLI runs it in again."""
    settings = json.loads((REPO_ROOT / "cdk.json").read_text())
    text = json.dumps(settings, indent=1)
    first_dev = '"dev": {'
    assert text.count(first_dev) == 1
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "cdk.json").write_text(text.replace(first_dev, '"dev": {"account": "111111111111"},\n' + first_dev))
    (tmp_path / "cdk.out").mkdir()
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps(CONTEXT), "CDK_OUTDIR": str(tmp_path / "cdk.out"),
           **JSII_QUIET}
    result = subprocess.run([sys.executable, str(REPO_ROOT / "app.py")], cwd=workdir, env=env,
                            capture_output=True, text=True, timeout=120)
    line = assert_stopped_with_one_line(result, tmp_path, "config error: cdk.json repeats the key 'dev'")
    assert line == ("config error: cdk.json repeats the key 'dev' in context.environments (JSON keeps only the "
                    "last one; remove or rename the other)")


def test_an_empty_env_context_is_refused_not_taken_for_dev(tmp_path):
    """`cdk synth -c env=` (or `make deploy ENV=`) names no environment; it must not build dev."""
    context = {**copy.deepcopy(CONTEXT), "env": ""}
    result = run_app(tmp_path, context)
    line = assert_stopped_with_one_line(result, tmp_path, "config error: environments.")
    assert line == "config error: environments.: unknown environment; defined environments are dev, prod"


def test_an_env_context_that_is_not_a_name_is_one_line(tmp_path):
    context = {**copy.deepcopy(CONTEXT), "env": ["dev"]}
    line = assert_stopped_with_one_line(run_app(tmp_path, context), tmp_path, "config error: environments.")
    assert line == "config error: environments.['dev']: unknown environment; defined environments are dev, prod"


def test_promotion_without_a_pipeline_is_one_line(tmp_path):
    context = copy.deepcopy(CONTEXT)
    del context["pipeline"]
    line = assert_stopped_with_one_line(run_app(tmp_path, context), tmp_path, "config error: promotion: ")
    assert line.startswith("config error: promotion: is set but pipeline is not")
