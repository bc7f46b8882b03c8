"""`python -m ops` as a user runs it: bad input is one line and a non-zero exit, never a traceback."""

from __future__ import annotations

import json

import pytest
import yaml

from ops_fakes import isolated_aws_env, run_ops, write_context


def assert_one_line_error(result, *words: str, code: int = 2) -> str:
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0]
    return lines[0]


@pytest.fixture
def offline(tmp_path):
    """Fake credentials, but every AWS endpoint is a dead loopback port."""
    return isolated_aws_env(tmp_path)


def test_unknown_environment_is_one_config_error_line(offline):
    line = assert_one_line_error(run_ops(["plan", "--env", "staging"], offline), "environments.staging")
    assert line.startswith("config error:") and "dev, prod" in line


def test_preflight_without_credentials_says_so_in_one_line(tmp_path):
    result = run_ops(["preflight", "--env", "dev"], isolated_aws_env(tmp_path, credentials=False))
    assert_one_line_error(result, "no AWS credentials found")
    assert result.stdout == ""


def test_kubeconfig_without_credentials_says_so_in_one_line(tmp_path):
    result = run_ops(["kubeconfig", "--env", "dev"], isolated_aws_env(tmp_path, credentials=False))
    assert_one_line_error(result, "no AWS credentials found")


def test_an_availability_zone_outside_the_region_names_the_field(offline, tmp_path):
    context = write_context(tmp_path, "prod", availabilityZones=["us-west-2a", "us-east-1b"])
    result = run_ops(["preflight", "--env", "prod", "--context-file", str(context)], offline)
    assert_one_line_error(result, "environments.prod.availabilityZones[0]", "'us-west-2a' is not a zone of region us-east-1")


def test_a_missing_context_file_is_one_line(offline, tmp_path):
    result = run_ops(["plan", "--env", "dev", "--context-file", str(tmp_path / "nope.json")], offline)
    assert_one_line_error(result, "nope.json not found")


@pytest.mark.parametrize("command", [["submit", "--env", "dev", "--image", "img:1", "--dry-run", "--preset"],
                                     ["plan", "--env", "dev", "--preset"], ["start", "--env", "dev"]])
def test_presets_are_choices_and_an_unknown_one_lists_them(offline, command):
    from config.presets import PRESETS

    line = assert_one_line_error(run_ops([*command, "gpt5"], offline), "invalid choice: 'gpt5'")
    assert all(name in line for name in PRESETS)


def test_submit_help_lists_every_set_key_with_its_values(offline):
    """The keys come from the table k8s/pods/pytorchjob.py checks overrides against, not from a second list."""
    from config.presets import RENDEZVOUS_BACKENDS
    from k8s.pods.pytorchjob import OVERRIDABLE

    help_text = run_ops(["submit", "--help"], offline).stdout
    rows = {line.split()[0]: line for line in help_text[help_text.index("--set keys"):].splitlines()[1:]}
    assert set(rows) == {("env.NAME" if kind is dict else key) for key, kind in OVERRIDABLE.items()}
    assert " or ".join(RENDEZVOUS_BACKENDS) in rows["rendezvous"]
    assert "maxSize" in rows["nodes_max"] and "TOKEN" in rows["env.NAME"]


def test_every_documented_set_example_renders():
    from config.overrides import OVERRIDES
    from ops import kube
    from ops.arguments import override, overrides
    from ops.envconfig import load

    for key, rule in OVERRIDES.items():
        text = f"env.{rule.example}" if rule.type is dict else f"{key}={rule.example}"
        manifest = kube.render(load("dev"), "llama3-8b-fsdp", image="img:1", job_name="smoke",
                               overrides=overrides([override(text)]))
        assert manifest["kind"] == "PyTorchJob", key


def test_submit_of_a_preset_whose_node_group_the_environment_lacks_is_refused(offline):
    result = run_ops(["submit", "--env", "prod", "--preset", "llama2-7b-fsdp", "--image", "img:1", "--dry-run"],
                     offline)
    assert_one_line_error(result, "config error", "p4d")


def test_submit_dry_run_prints_the_runs_peers_policy_then_the_run(offline):
    """What `ops submit` would create, in its order, for kubectl or GitOps: a run created without
    its peers policy would hang in rendezvous under the training namespace's default deny."""
    from k8s.pods.network_policy import job_peers_policy

    result = run_ops(["submit", "--env", "dev", "--preset", "cpu-ddp", "--image", "registry/trainer:1",
                      "--name", "smoke", "--dry-run"], offline)
    assert result.returncode == 0, result.stderr
    policy, job = yaml.safe_load_all(result.stdout)
    assert job["kind"] == "PyTorchJob" and job["metadata"]["name"] == "smoke"
    assert policy == job_peers_policy(job) and policy["metadata"]["name"] == "smoke-peers"


@pytest.mark.parametrize("nodes, words", [("0", "must be at least 1, got 0"), ("-3", "got -3"),
                                          ("many", "must be a whole number, got 'many'"),
                                          ("65537", "must be at most 65536"), ("9" * 400, "must be at most 65536")])
def test_plan_rejects_a_bad_node_count(offline, nodes, words):
    assert_one_line_error(run_ops(["plan", "--env", "prod", "--nodes", nodes], offline), "--nodes", words)


@pytest.mark.parametrize("command", [["local", "--check"], ["validate", "--dist", "{tmp}"]])
@pytest.mark.parametrize("seconds", ["nan", "inf", "-inf", "1e300", "0", "-1"])
def test_a_timeout_that_would_not_bound_the_command_is_a_usage_error(command, seconds, tmp_path, capsys):
    """NaN passes `> 0` and fires a timer at once; infinity and 1e300 make threading.Timer fail in
    its own thread, so the job would run unbounded."""
    from ops.cli import main

    with pytest.raises(SystemExit) as exit_:
        main([*(a.format(tmp=tmp_path) for a in command), "--timeout", seconds])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: argument --timeout: "), err


# Every command that starts a pod from a user's --image.
IMAGE_COMMANDS = {
    "submit": ["submit", "--env", "dev", "--preset", "cpu-ddp", "--dry-run"],
    "start": ["start", "cpu-ddp", "--env", "dev", "--dry-run"],
    "data": ["data", "--env", "dev", "--source", "c4", "--dry-run"],
    "model download": ["model", "download", "--env", "dev", "--repo", "gpt2", "--dry-run"],
}


@pytest.mark.parametrize("command", IMAGE_COMMANDS.values(), ids=IMAGE_COMMANDS)
@pytest.mark.parametrize("image", ["", "a b:1", "UPPER:1", "img:1\nx", "registry/trainer", "registry/trainer:latest"])
def test_an_image_that_is_no_pinned_oci_reference_is_a_usage_error_naming_image(command, image, tmp_path,
                                                                               monkeypatch, capsys):
    """The kubelet refuses the first three (InvalidImageName) and the last two float; an explicit
    empty --image is a mistake, not a request for the published image."""
    from ops.cli import main

    for key, value in isolated_aws_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SystemExit) as exit_:
        main([*command, f"--image={image}"])
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("error: argument --image: "), err


@pytest.mark.parametrize("command", [IMAGE_COMMANDS["submit"], IMAGE_COMMANDS["start"]], ids=["submit", "start"])
@pytest.mark.parametrize("value", [str(2**30), str(2**63)])
def test_a_max_restarts_whose_backoff_limit_would_not_fit_int32_is_one_line_naming_it(command, value, offline):
    """backoffLimit is max_restarts x nodes_max + 1 and an int32 in the PyTorchJob CRD, which the API
    server refuses past 2**31 - 1: cpu-ddp (2 nodes) with 2**30 rendered 2147483649, exit 0."""
    result = run_ops([*command, "--image", "img:1", "--set", f"max_restarts={value}"], offline)
    assert_one_line_error(result, "max_restarts", str((2**31 - 2) // 2))
    assert result.stdout == ""


@pytest.mark.parametrize("name", ["BAD", "run\n", "a" * 49, "", "1run"])
def test_a_submit_name_that_is_no_run_name_is_a_usage_error_naming_name(name, capsys):
    """The error named the renderer's field, job_name, which is no flag of `ops submit`."""
    from ops.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["submit", "--env", "dev", "--preset", "cpu-ddp", "--image", "img:1", "--dry-run", f"--name={name}"])
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("error: argument --name: must be a DNS label"), err


def test_az_recommend_rejects_an_unknown_region(offline):
    result = run_ops(["az-recommend", "--instance-type", "p5.48xlarge", "--region", "mars-north-1"], offline)
    assert_one_line_error(result, "unknown region 'mars-north-1'")


def test_status_without_a_kubeconfig_points_at_the_kubeconfig_command(offline, tmp_path):
    result = run_ops(["status", "--kubeconfig", str(tmp_path / "missing")], offline)
    assert_one_line_error(result, "no usable kubeconfig", "python -m ops kubeconfig")


def test_no_command_is_one_line(offline):
    assert_one_line_error(run_ops([], offline), "required")


def test_preflight_exits_1_and_prints_the_table_when_a_check_fails(aws, tmp_path):
    """End to end against moto: dev's account 111111111111 is not the caller's 222222222222."""
    result = run_ops(["preflight", "--env", "dev"], isolated_aws_env(tmp_path, aws))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].split() == ["CHECK", "STATUS", "REASON"]
    credentials = next(line for line in lines if line.startswith("credentials"))
    assert "FAIL" in credentials and "111111111111" in credentials
    assert any(line.startswith("training AZ") and "PASS" in line and "usw2-az1" in line for line in lines)
    # Then who can reach the cluster, whether the deploy switches its training API (no cluster yet
    # here), whether what is deployed can take the configuration (nothing yet), the bootstrap, and
    # this machine's tools: one row each.
    for name in ("API endpoint", "admin role PlatformAdmin", "cluster admin", "trainingApi", "fsx.storageCapacityGiB",
                 "FSx replacement", "kubernetesVersion", "vpcCidr", "CDK bootstrap", "Docker", "AWS CLI", "Node"):
        assert sum(line.startswith(name + " ") for line in lines) == 1, (name, result.stdout)


def test_help_documents_the_one_exit_code_convention(offline):
    result = run_ops(["--help"], offline)
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "0 done, and every check it made passed" in text
    assert "1 the command ran and a check failed" in text
    assert "2 usage or configuration error, or an unmet precondition" in text
    for command in ("local", "validate", "synth-summary", "plan", "preflight", "status"):
        assert command in result.stdout


def subcommands() -> list[str]:
    from ops.cli import build_parser

    [sub] = [a for a in build_parser()._actions if a.dest == "command"]
    return sorted(sub.choices)


@pytest.mark.parametrize("command", subcommands())
def test_every_command_exits_2_with_one_line_on_a_usage_error(command, capsys):
    from ops.cli import main

    with pytest.raises(SystemExit) as exit_:
        main([command, "--no-such-flag"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "(see `python -m ops" in err


def test_the_former_module_entry_points_are_subcommands(offline):
    assert {"local", "validate", "synth-summary"} <= set(subcommands())
    for command in ("local", "validate", "synth-summary"):
        result = run_ops([command, "--help"], offline)
        assert result.returncode == 0 and result.stdout.startswith(f"usage: ops {command}"), result.stderr


def test_local_with_an_unknown_job_is_a_config_error(offline):
    assert_one_line_error(run_ops(["local", "--job", "nope"], offline), "--job", "unknown job 'nope'", "cpu-ddp")


def test_preflight_json_is_the_table_as_data(aws, tmp_path):
    result = run_ops(["preflight", "--env", "dev", "-o", "json"], isolated_aws_env(tmp_path, aws))
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert (data["environment"], data["failed"]) == ("dev", True)
    checks = {c["name"]: c for c in data["checks"]}
    assert checks["credentials"]["status"] == "fail" and "111111111111" in checks["credentials"]["reason"]
    assert set(checks["credentials"]) == {"name", "status", "reason"}


def test_az_recommend_json_lists_the_zones(aws, tmp_path):
    result = run_ops(["az-recommend", "--instance-type", "p5.48xlarge", "--region", "us-west-2", "-o", "json"],
                     isolated_aws_env(tmp_path, aws))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["instance_type"] == "p5.48xlarge" and data["region"] == "us-west-2"
    assert {z["name"] for z in data["zones"]} and all(z["zone_id"].startswith("usw2-az") for z in data["zones"])
