"""`python -m ops synth-summary`: offline synth, then the summary a user checks before paying for anything."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ops import cli, synth_summary

# Share the session's synthesized environments with the stack tests (one synth per variant).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "stacks"))
from synth_helpers import BLOCK, RESERVATION, synth  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]


def fake_cdk(outdir_holder: list, returncode: int = 0, stderr: str = ""):
    def run(command, **kwargs):
        outdir_holder.append((command, kwargs))
        return subprocess.CompletedProcess(command, returncode, stdout="", stderr=stderr)
    return run


def never_run(*args, **kwargs):
    raise AssertionError("cdk synth must not run for a bad environment")


def synth_summary_main(monkeypatch, argv: list[str], run) -> int:
    """`python -m ops synth-summary ARGV` in this process, with `run` standing in for ops.proc.run."""
    monkeypatch.setattr(synth_summary.proc, "run", run)
    return cli.main(["synth-summary", *argv])


def row(summary: str, name: str) -> list[str]:
    for line in summary.splitlines():
        if line.split()[:1] == [name]:
            return line.split()
    raise AssertionError(f"no row for {name}:\n{summary}")


@pytest.fixture(scope="module")
def dev_summary():
    dev = synth("dev")
    return dev, synth_summary.summarize(dev.config, dev.outdir)


def test_unknown_env_prints_one_line_and_exits_2(tmp_path):
    result = subprocess.run([sys.executable, "-m", "ops", "synth-summary", "--env", "staging", "--outdir", str(tmp_path)],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "config error: environments.staging: unknown environment; defined environments are dev, prod"]
    assert result.stdout == ""


def test_bad_env_never_starts_a_synth(capsys, monkeypatch):
    assert synth_summary_main(monkeypatch, ["--env", "nope"], never_run) == 2
    assert capsys.readouterr().err.startswith("config error: environments.nope")


def test_runs_the_offline_cdk_synth_for_the_env_then_summarizes(capsys, monkeypatch):
    dev = synth("dev")
    calls = []
    assert synth_summary_main(monkeypatch, ["--env", "dev", "--outdir", str(dev.outdir)], fake_cdk(calls)) == 0
    [(command, kwargs)] = calls
    assert command[0].endswith("node_modules/.bin/cdk") and command[1] == "synth"
    assert ["-c", "env=dev"] == command[command.index("-c"):command.index("-c") + 2]
    assert "--quiet" in command and command[command.index("--output") + 1] == str(dev.outdir)
    assert kwargs["cwd"] == synth_summary.REPO_ROOT
    assert "Node groups" in capsys.readouterr().out


def test_failed_synth_exits_1_with_its_error(capsys, monkeypatch):
    """cdk synth runs the checks (config validation, cdk-nag): its failure is a failed check."""
    calls = []
    assert synth_summary_main(monkeypatch, ["--env", "dev"], fake_cdk(calls, 1, "boom")) == 1
    err = capsys.readouterr().err
    assert "cdk synth failed" in err and "boom" in err


def test_missing_cdk_cli_is_one_line_saying_how_to_install_it_and_exit_2(capsys, monkeypatch):
    def missing(*args, **kwargs):
        raise FileNotFoundError(args[0][0])
    assert synth_summary_main(monkeypatch, ["--env", "dev"], missing) == 2
    assert capsys.readouterr().err.strip() == "error: node_modules/.bin/cdk not found; run `make install` first"


def test_summary_lists_every_stack_with_its_resource_count(dev_summary):
    dev, summary = dev_summary
    for name in ("Network", "Cluster", "Storage", "Registry"):
        count = len(dev.template_json(name.lower())["Resources"])
        assert row(summary, f"dev/{name}")[1] == str(count)


def test_summary_lists_each_nodegroup_with_type_zone_sizes_efa_and_capacity(dev_summary):
    dev, summary = dev_summary
    training_zone = dev.config.training_availability_zone
    for group in dev.config.training_nodegroups:
        cells = row(summary, group.name)
        assert cells[1:7] == [group.instance_type_name, training_zone, str(group.min_size), str(group.max_size),
                              str(group.desired_size), str(group.instance_type.efa_interfaces)]
        assert cells[7] == "ON_DEMAND"
    assert row(summary, "p5")[6] == "32" and row(summary, "p4d")[6] == "4"
    assert row(summary, "system")[2] == ",".join(dev.config.availability_zones)


def test_summary_shows_fsx_capacity_throughput_and_zone(dev_summary):
    dev, summary = dev_summary
    fsx = dev.config.fsx
    assert (f"PERSISTENT_2 {fsx.storage_capacity_gib} GiB, {fsx.throughput_per_tib} MB/s/TiB = "
            f"{fsx.throughput_mbps:.0f} MB/s, zone {dev.config.training_availability_zone}") in summary


def test_summary_compares_ips_at_max_with_the_training_subnet(dev_summary):
    dev, summary = dev_summary
    assert (f"{dev.config.training_subnet_ips_at_max()} needed at maxSize of "
            f"{dev.config.private_subnet_capacity} usable") in summary


def test_summary_shows_reservations_and_capacity_blocks():
    blocks = synth("blocks")
    summary = synth_summary.summarize(blocks.config, blocks.outdir)
    assert row(summary, "p5-block")[7:9] == ["CAPACITY_BLOCK", BLOCK]
    assert row(summary, "p5en-odcr")[7:9] == ["ON_DEMAND", RESERVATION]
    assert row(summary, "p5en-odcr")[6] == "16"
    assert "placement" not in " ".join(row(summary, "p5-block") + row(summary, "p5en-odcr"))
    assert "backups 14 days" in summary


def test_summary_says_which_upgrade_policy_the_cluster_has_and_what_it_costs(dev_summary):
    """Amazon EKS pricing: $0.10 per cluster hour in standard support, $0.60 in extended support
    (https://aws.amazon.com/eks/pricing/); AWS::EKS::Cluster UpgradePolicy: STANDARD upgrades the
    cluster at the end of standard support, EXTENDED keeps it on its version and bills extended support."""
    dev, summary = dev_summary
    assert ("Kubernetes 1.35: EKS standard support until 2027-03-27. Upgrade policy STANDARD: the control plane "
            "costs $0.10/hour and EKS upgrades it to the next version when standard support ends") in summary
    split = synth("split")
    extended = synth_summary.summarize(split.config, split.outdir)
    assert ("Kubernetes 1.35: EKS standard support until 2027-03-27. Upgrade policy EXTENDED: the control plane "
            "costs $0.10/hour until then, then $0.60/hour in extended support until 2028-03-27") in extended


def test_json_output_is_the_summary_as_data(capsys, monkeypatch, dev_summary):
    dev, text = dev_summary
    argv = ["--env", "dev", "--outdir", str(dev.outdir), "-o", "json"]
    assert synth_summary_main(monkeypatch, argv, fake_cdk([])) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["environment"]["name"] == "dev" and data["support"] in text
    stacks = {s["stack"]: s["resources"] for s in data["stacks"]}
    assert stacks["dev/Network"] == len(dev.template_json("network")["Resources"])
    groups = {g["name"]: g for g in data["nodegroups"]}
    p5 = dev.config.nodegroup("p5")
    assert (groups["p5"]["instance"], groups["p5"]["max"], groups["p5"]["efa"]) == (p5.instance_type_name, p5.max_size, 32)
    subnet = data["training_subnet"]
    assert subnet["ips_needed_at_max"] == dev.config.training_subnet_ips_at_max()
    assert sum(g["ips"] for g in subnet["groups"]) == subnet["ips_needed_at_max"]
    assert data["fsx"] and all(line in text for line in data["fsx"])
    idle = next(sc for sc in data["cost"]["scenarios"] if sc["name"] == "idle")
    assert f"${idle['hourly_usd']:,.2f}/hour" in text


def test_the_summary_ends_with_the_cost_at_decision_time(dev_summary):
    """Idle, at desiredSize and at maxSize, per hour and per month, from the dated price table
    (figures recomputed from the table in tests/ops/test_cost.py)."""
    from ops import cost, prices

    dev, summary = dev_summary
    tail = summary.splitlines()[-len(cost.render(dev.config)):]
    assert tail == cost.render(dev.config)
    assert prices.PRICES_AS_OF in tail[0]
    idle = cost.idle(dev.config)
    assert row(summary, "idle")[1:] == [f"${idle.hourly:,.2f}/hour", f"${idle.monthly:,.2f}/month"]


def test_a_synth_that_never_ends_is_stopped_at_its_timeout_with_one_line(tmp_path, monkeypatch, capsys):
    """A real process that never answers (as cdk did for --outdir under /proc): killed at the deadline."""
    stuck = tmp_path / "cdk"
    stuck.write_text("#!/bin/sh\nexec sleep 600\n")
    stuck.chmod(0o755)
    monkeypatch.setattr(synth_summary, "CDK", stuck)
    monkeypatch.setattr(synth_summary, "SYNTH_TIMEOUT_S", 1)
    assert cli.main(["synth-summary", "--env", "dev", "--outdir", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.splitlines() == ["error: cdk synth of dev did not finish in 1 s"]


def test_an_outdir_under_proc_is_one_line_before_any_synth(monkeypatch, capsys):
    """node's recursive mkdir spins forever there; ops makes the directory itself first."""
    assert synth_summary_main(monkeypatch, ["--env", "dev", "--outdir", "/proc/no-such-outdir"], never_run) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: --outdir: cannot create directory /proc/no-such-outdir (No such file or directory)"]
def test_admins_from_another_account_are_flagged(dev_summary):
    """An admin role of another account is administered by whoever controls that account; the
    summary says so before anything is deployed."""
    dev, summary = dev_summary
    assert row(summary, dev.config.admin_role_arns[0])[1:] == ["111111111111", "this", "account"]
    assert "WARNING" not in summary
    foreign = "arn:aws:iam::222222222222:role/ops/VendorAdmin"
    config = dataclasses.replace(dev.config, admin_role_arns=(*dev.config.admin_role_arns, foreign))
    flagged = synth_summary.summarize(config, dev.outdir)
    assert row(flagged, foreign)[1:] == ["222222222222", "ANOTHER", "ACCOUNT"]
    assert ("  WARNING: 1 admin principal(s) belong to another account than 111111111111: whoever controls that "
            "account administers this cluster") in flagged.splitlines()
    data = synth_summary.summary_data(config, dev.outdir)
    assert {"principal": foreign, "account": "222222222222", "whose": "ANOTHER ACCOUNT"} in data["cluster_admins"]


def test_a_bad_pipeline_setting_is_one_config_line_before_any_synth(tmp_path, monkeypatch, capsys):
    """app.py reads `pipeline` and `promotion` on every synth, so a bad one must stop here in one line
    (exit 2), not come back as a failed synth with the cdk CLI's output (exit 1)."""
    context = json.loads((REPO_ROOT / "cdk.json").read_text())
    context["context"]["promotion"] = ["dev", "staging"]
    path = tmp_path / "cdk.json"
    path.write_text(json.dumps(context))
    monkeypatch.setattr(synth_summary.envconfig, "DEFAULT_CONTEXT_FILE", path)
    assert synth_summary_main(monkeypatch, ["--env", "dev", "--outdir", str(tmp_path / "out")], never_run) == 2
    assert capsys.readouterr().err.splitlines() == [
        "config error: promotion[1]: 'staging' is not an environment; defined are dev, prod"]
