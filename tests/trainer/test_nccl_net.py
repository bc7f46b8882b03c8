"""EFA fails closed: the start-up check reads NCCL's init lines (recorded fixtures, see
fixtures/README.md for where each line format comes from) and stops the worker with its own exit
status when NCCL is not on aws-ofi-nccl's EFA provider."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from trainer import nccl_net
from config.kubernetes import EXIT_NOT_ON_EFA
from trainer.nccl_net import CHECK_FAILED, CHECK_PASSED, NotOnEfa

FIXTURES = Path(__file__).parent / "fixtures"
EFA_POD = {"TRAINER_INSTANCE_TYPE": "p5.48xlarge", "NCCL_NET_PLUGIN": "ofi", "NCCL_NET": "Libfabric",
           "FI_PROVIDER": "efa", "NCCL_DEBUG": "WARN"}


def recorded(name: str, tmp_path: Path) -> Path:
    log = tmp_path / "nccl.log"
    log.write_text((FIXTURES / name).read_text())
    return log


def test_nccl_on_the_efa_provider_passes_and_says_so(tmp_path):
    log = recorded("nccl_init_efa.log", tmp_path)
    net = nccl_net.parse(log.read_text())
    assert (net.network, net.provider, net.fabric, net.nics) == ("Libfabric", "efa", "efa-direct", 32)
    assert nccl_net.confirm(log, dict(EFA_POD)) == (
        f"{CHECK_PASSED} NCCL network Libfabric, libfabric provider efa (fabric efa-direct, 32 of 32 NICs of "
        f"p5.48xlarge) [NCCL log: {log}]")


def test_fewer_efa_nics_than_the_instance_table_says_fails_naming_both_counts(tmp_path):
    log = recorded("nccl_init_efa_missing_nic.log", tmp_path)
    with pytest.raises(NotOnEfa) as err:
        nccl_net.confirm(log, dict(EFA_POD))
    assert str(err.value) == (
        f"{CHECK_FAILED} aws-ofi-nccl found 31 EFA NICs, p5.48xlarge has 32: this pod trains at about 31/32 of "
        "the node's network bandwidth; check that the pod got vpc.amazonaws.com/efa: 32 and the node's EFA "
        f"devices (ops doctor) [NCCL log: {log}]")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("instance, nics, passes", [
    ("p4d.24xlarge", 4, True), ("p4d.24xlarge", 3, False), ("p5en.48xlarge", 16, True),
    ("p5en.48xlarge", 8, False), ("g5.48xlarge", 1, True), ("p5.48xlarge", 32, True)])
def test_the_nic_count_is_compared_with_each_instance_types_efa_interfaces(instance, nics, passes):
    text = (f"h:1:1 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa (found {nics} nics)\n"
            "h:1:1 [0] NCCL INFO Using network Libfabric\n")
    why = nccl_net.cause(nccl_net.parse(text), dict(EFA_POD, TRAINER_INSTANCE_TYPE=instance))
    assert (why is None) == passes, why


def test_a_provider_line_without_a_nic_count_fails_where_the_table_knows_the_count():
    net = nccl_net.parse("h:1:1 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa\n"
                         "h:1:1 [0] NCCL INFO Using network Libfabric\n")
    assert nccl_net.cause(net, dict(EFA_POD)) == (
        "aws-ofi-nccl logged no NIC count ('found N nics'), so all 32 EFA devices of p5.48xlarge cannot be confirmed")
    # A pod that names no instance type of the table (its own NCCL_NET_PLUGIN) is checked for EFA only.
    assert nccl_net.cause(net, {"NCCL_NET_PLUGIN": "ofi", "TRAINER_INSTANCE_TYPE": "p9.unknown"}) is None


def test_duplicated_connections_are_counted_once_per_nic():
    """SENDRECV with OFI_NCCL_NIC_DUP_CONNS multiplies the devices before printing the count."""
    net = nccl_net.parse("h:1:1 [0] NCCL INFO NET/OFI DUP_CONNS of 4 changing device count to 12\n"
                         "h:1:1 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa (found 12 nics)\n"
                         "h:1:1 [0] NCCL INFO Using network Libfabric\n")
    assert net.nics == 3
    assert "found 3 EFA NICs, p4d.24xlarge has 4" in nccl_net.cause(net, dict(EFA_POD, TRAINER_INSTANCE_TYPE="p4d.24xlarge"))


def test_a_fallback_to_sockets_fails_naming_the_missing_plugin(tmp_path):
    log = recorded("nccl_init_socket.log", tmp_path)
    with pytest.raises(NotOnEfa) as err:
        nccl_net.confirm(log, dict(EFA_POD, NCCL_NET=""))
    assert str(err.value) == (
        f"{CHECK_FAILED} NCCL fell back to Socket instead of the aws-ofi-nccl plugin: traffic would go over TCP, "
        "not EFA (NET/Plugin: Could not find: ofi libnccl-net-ofi.so.); check NCCL_NET_PLUGIN=ofi and that "
        f"libnccl-net-ofi.so is on LD_LIBRARY_PATH [NCCL log: {log}]")


def test_the_plugin_on_libfabrics_tcp_provider_fails(tmp_path):
    log = recorded("nccl_init_tcp_provider.log", tmp_path)
    with pytest.raises(NotOnEfa, match=r"selected libfabric provider tcp, not efa \(FI_PROVIDER=unset\)"):
        nccl_net.confirm(log, {k: v for k, v in EFA_POD.items() if k != "FI_PROVIDER"})


def test_a_failed_init_on_a_pod_without_efa_devices_names_the_cause(tmp_path):
    """With NCCL_NET set NCCL fails the communicator instead of falling back; the check turns the
    generic init error into the line that says why."""
    log = recorded("nccl_init_no_efa_device.log", tmp_path)
    with pytest.raises(NotOnEfa) as err:
        nccl_net.confirm(log, dict(EFA_POD), init_error=RuntimeError("NCCL error: invalid usage"))
    assert str(err.value).startswith(
        f"{CHECK_FAILED} NCCL could not start the Libfabric network "
        "(NET/OFI OFI fi_getinfo() call failed: No data available); "
        "are the pod's vpc.amazonaws.com/efa devices (/dev/infiniband) present?")


def test_an_init_failure_nccl_did_not_cause_is_left_to_the_caller(tmp_path):
    log = tmp_path / "never-written.log"
    assert nccl_net.confirm(log, dict(EFA_POD), init_error=TimeoutError("rendezvous")) == ""


def test_a_lazily_created_communicator_is_forced_before_reading(tmp_path):
    log = tmp_path / "nccl.log"
    nccl_net.confirm(log, dict(EFA_POD), force=lambda: log.write_text((FIXTURES / "nccl_init_efa.log").read_text()))
    with pytest.raises(NotOnEfa, match="logged no 'Using network' line"):
        nccl_net.confirm(tmp_path / "still-empty.log", dict(EFA_POD), force=lambda: None)


def test_the_pre_1_14_provider_line_is_understood():
    """The older wording, as in NVIDIA/nccl issue #1597's log."""
    net = nccl_net.parse("h:1:1 [0] NCCL INFO NET/OFI Selected Provider is efa (found 16 nics)\n"
                         "h:1:1 [0] NCCL INFO Using network AWS Libfabric\n")
    assert (net.network, net.provider, net.nics, net.on_ofi) == ("AWS Libfabric", "efa", 16, True)


def test_prepare_sets_the_fail_closed_knobs_only_on_efa_pods(tmp_path):
    env = {"TRAINER_INSTANCE_TYPE": "p5.48xlarge", "NCCL_DEBUG": "WARN"}
    log = nccl_net.prepare(env, str(tmp_path))
    assert env["NCCL_NET"] == "Libfabric" and env["FI_PROVIDER"] == "efa" and env["NCCL_DEBUG"] == "INFO"
    assert env["NCCL_DEBUG_FILE"] == str(tmp_path / "nccl-init.%p.log")
    assert log == tmp_path / f"nccl-init.{os.getpid()}.log"
    cpu = {"TRAINER_INSTANCE_TYPE": "m5.2xlarge", "NCCL_DEBUG": "WARN"}
    assert nccl_net.prepare(cpu) is None and cpu == {"TRAINER_INSTANCE_TYPE": "m5.2xlarge", "NCCL_DEBUG": "WARN"}
    mine = {"NCCL_NET_PLUGIN": "ofi", "NCCL_NET": "OFI", "NCCL_DEBUG": "TRACE", "NCCL_DEBUG_FILE": "/x/%h-%p-%%.log"}
    nccl_net.prepare(mine)
    assert (mine["NCCL_NET"], mine["NCCL_DEBUG"], mine["NCCL_DEBUG_FILE"]) == ("OFI", "TRACE", "/x/%h-%p-%%.log")


def test_the_log_path_expands_as_nccl_expands_it():
    host = socket.gethostname().split(".", 1)[0]
    assert nccl_net.expand_log_path("/tmp/%h.%p.%%.%x", pid=42) == Path(f"/tmp/{host}.42.%.%x")


def _fake_nccl(monkeypatch, fixture: str | None, *, fail: bool = False):
    """torch as on a GPU node, and an init_process_group that writes what NCCL would have logged."""
    import torch
    import torch.distributed as dist

    def init_process_group(**kwargs):
        assert kwargs["backend"] == "nccl"
        if fixture:
            nccl_net.expand_log_path(os.environ["NCCL_DEBUG_FILE"]).write_text(
                (FIXTURES / fixture).read_text())
        if fail:
            raise dist.DistBackendError("NCCL error in: ProcessGroupNCCL.cpp, invalid usage")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(dist, "init_process_group", init_process_group)
    monkeypatch.setattr(dist, "get_rank", lambda *a, **k: 0)
    monkeypatch.setattr(dist, "get_world_size", lambda *a, **k: 1)


@pytest.fixture
def efa_pod_env(monkeypatch, tmp_path):
    """An EFA pod's environment; the trainer writes into os.environ, so all of it is put back."""
    saved = dict(os.environ)
    for key in ("NCCL_NET", "FI_PROVIDER", "NCCL_DEBUG_FILE", "RANK"):
        os.environ.pop(key, None)
    os.environ.update(TRAINER_INSTANCE_TYPE="p5.48xlarge", NCCL_NET_PLUGIN="ofi", NCCL_DEBUG="WARN",
                      TMPDIR=str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.mark.parametrize("fixture, fail", [("nccl_init_socket.log", False), ("nccl_init_no_efa_device.log", True)])
def test_the_trainer_exits_with_its_own_status_when_nccl_is_not_on_efa(monkeypatch, capsys, efa_pod_env,
                                                                       fixture, fail):
    from trainer import ddp
    from trainer.cli import run_main

    _fake_nccl(monkeypatch, fixture, fail=fail)
    monkeypatch.setattr(sys, "argv", ["ddp", "--epochs", "1"])
    with pytest.raises(SystemExit) as exit_:
        run_main(ddp.main)
    assert exit_.value.code == EXIT_NOT_ON_EFA
    err = capsys.readouterr().err
    assert err.startswith(CHECK_FAILED) and err.count("\n") == 1


def test_the_trainer_reports_efa_and_goes_on_when_nccl_is_on_it(monkeypatch, capsys, efa_pod_env):
    from trainer import dist as tdist

    _fake_nccl(monkeypatch, "nccl_init_efa.log")
    rt = tdist.init()
    assert rt.backend == "nccl"
    assert capsys.readouterr().out.startswith(f"{CHECK_PASSED} NCCL network Libfabric, libfabric provider efa")
