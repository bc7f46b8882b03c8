"""EFA fails closed: on an EFA node group, prove at start-up that NCCL talks over EFA.

The failure users fear is silent: without the aws-ofi-nccl plugin (or with libfabric on another
provider) NCCL falls back to TCP sockets and the job runs 5-10x slower, or hangs. Two layers stop it:

1. NCCL's and libfabric's own knobs, set on EFA pods by the job chart (k8s/pods/network_env.py EFA_ENV) and
   defaulted here: NCCL_NET names the network NCCL must use, and NCCL then fails the communicator
   ("Failed to initialize any NET plugin") instead of falling back (NCCL environment variables,
   https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-net; NCCL v2.27.7
   src/plugin/net.cc ncclNetInit). aws-ofi-nccl registers its NVIDIA net as "Libfabric" since
   v1.13.0 (aws/aws-ofi-nccl src/nccl_ofi_interface_nvidia.cpp; the trainer image's EFA installer
   1.43.1 ships v1.16.2, the nccl-tests image v1.16.3, both "Libfabric"). FI_PROVIDER=efa keeps
   libfabric to the EFA provider, so the plugin fails rather than run over libfabric's tcp provider.
2. NCCL's own account of what it chose, read back: NCCL_DEBUG=INFO into NCCL_DEBUG_FILE for this
   process, then after the communicator exists (trainer/dist.py creates it eagerly) the lines
   "NCCL INFO Using network <name>" (NCCL src/init.cc) and "NET/OFI Selected provider is <prov>, ..."
   (aws-ofi-nccl src/nccl_ofi_net.cpp; "Selected Provider is <prov> (found N nics)" before v1.14)
   must say Libfabric and efa. Anything else ends the worker with EXIT_NOT_ON_EFA and one line
   starting CHECK_FAILED that names the cause; `ops logs` prints that line first.
3. The NIC count in that provider line, compared with the instance table (config/instance_types.py
   efa_interfaces for TRAINER_INSTANCE_TYPE; the pod requests exactly that many EFA devices,
   k8s/pods/resources.py accelerator_resources). In aws-ofi-nccl v1.16.2 and v1.16.3 the count is the
   number of fi_info entries of the selected provider and fabric (src/nccl_ofi_ofiutils.cpp
   nccl_ofi_ofiutils_get_providers; one per EFA device the container sees), printed by
   src/nccl_ofi_net.cpp nccl_net_ofi_query_provider_capabilities. The SENDRECV protocol multiplies
   it by OFI_NCCL_NIC_DUP_CONNS first and says so ("DUP_CONNS of %d changing device count to %d",
   src/nccl_ofi_sendrecv.cpp), which this divides back out. Fewer NICs than the table fails: a node
   that lost an EFA device still trains, at a fraction of its bandwidth.

NCCL keeps logging to that file for the rest of the run; its path is printed with the verdict.
This module imports no torch, so `ops` can share its markers.
"""

from __future__ import annotations

import os
import re
import socket
import tempfile
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from config.instance_types import INSTANCE_TYPES
from config.kubernetes import EFA_CHECK_FAILED as CHECK_FAILED, EFA_CHECK_PASSED as CHECK_PASSED, OFI_NCCL_NET

# Names aws-ofi-nccl's net takes: "Libfabric" by default, renamed to what NCCL_NET asks for when
# that is "OFI" or "AWS Libfabric" (its pre-1.12 name); NCCL compares them case-insensitively.
OFI_NET_NAMES = ("libfabric", "ofi", "aws libfabric")
EFA_PROVIDER = "efa"
DEFAULT_LOG = "nccl-init.%p.log"
_QUIET_LEVELS = ("", "VERSION", "WARN")

_USING_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$")
_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is ([^\s,]+)"
                       r"(?:, fabric is ([^\s,]+))?(?:.*?\(found (\d+) nics\))?")
_DUP_CONNS = re.compile(r"NET/OFI DUP_CONNS of (\d+) changing device count to (\d+)")
_NCCL_WARN = re.compile(r"NCCL WARN (.+?)\s*$")
_PLUGIN_MISSING = re.compile(r"NET/Plugin: ?(Could not find:.*?|.*cannot open shared object file.*?)\s*$")


def efa_expected(environ: MutableMapping[str, str]) -> bool:
    """True on pods of an EFA node group: the chart gives them NCCL_NET_PLUGIN, and their
    TRAINER_INSTANCE_TYPE has EFA interfaces in the instance-type table."""
    instance = INSTANCE_TYPES.get(environ.get("TRAINER_INSTANCE_TYPE", ""))
    return bool(environ.get("NCCL_NET_PLUGIN")) or bool(instance and instance.supports_efa)


def expected_nics(environ: MutableMapping[str, str]) -> tuple[str, int] | None:
    """(instance type, EFA interfaces) from the table for this pod, or None where it is not known."""
    instance = INSTANCE_TYPES.get(environ.get("TRAINER_INSTANCE_TYPE", ""))
    return (instance.name, instance.efa_interfaces) if instance and instance.supports_efa else None


def expand_log_path(template: str, pid: int | None = None) -> Path:
    """NCCL_DEBUG_FILE as NCCL expands it (src/debug.cc): %h hostname up to its first dot, %p pid, %% a %."""
    host = socket.gethostname().split(".", 1)[0]
    text = re.sub(r"%(.)", lambda m: {"h": host, "p": str(pid or os.getpid()), "%": "%"}.get(m.group(1), m.group(0)),
                  template)
    return Path(text)


def prepare(environ: MutableMapping[str, str], log_dir: str | None = None) -> Path | None:
    """Before NCCL starts: on an EFA pod, make NCCL fail rather than fall back and log its choice to a
    file this process can read. Returns that file's path, or None where EFA is not expected."""
    if not efa_expected(environ):
        return None
    environ.setdefault("NCCL_NET", OFI_NCCL_NET)
    environ.setdefault("FI_PROVIDER", EFA_PROVIDER)
    if environ.get("NCCL_DEBUG", "").upper() in _QUIET_LEVELS:
        environ["NCCL_DEBUG"] = "INFO"
    environ.setdefault("NCCL_DEBUG_FILE", str(Path(log_dir or tempfile.gettempdir()) / DEFAULT_LOG))
    return expand_log_path(environ["NCCL_DEBUG_FILE"])


@dataclass(frozen=True)
class NcclNetwork:
    """What NCCL's init lines say about its network."""

    network: str | None  # "Libfabric", "Socket", "IB"; None if NCCL printed no choice
    provider: str | None  # libfabric provider aws-ofi-nccl selected
    fabric: str | None
    nics: int | None
    plugin_missing: str | None  # NCCL's line saying the plugin library was not found
    warnings: tuple[str, ...]  # NCCL WARN messages, in order

    @property
    def on_ofi(self) -> bool:
        return self.network is not None and self.network.lower() in OFI_NET_NAMES


def parse(text: str) -> NcclNetwork:
    network = provider = fabric = nics = missing = None
    dup_conns = 1
    warnings = []
    for line in text.splitlines():
        if m := _DUP_CONNS.search(line):
            dup_conns = max(1, int(m.group(1)))
        elif m := _USING_NETWORK.search(line):
            network = network or m.group(1)
        elif m := _PROVIDER.search(line):
            provider, fabric = provider or m.group(1), fabric or m.group(2)
            nics = nics if nics is not None else (int(m.group(3)) if m.group(3) else None)
        elif m := _PLUGIN_MISSING.search(line):
            missing = missing or f"NET/Plugin: {m.group(1)}"
        if m := _NCCL_WARN.search(line):
            warnings.append(m.group(1))
    if nics is not None:
        nics //= dup_conns
    return NcclNetwork(network, provider, fabric, nics, missing, tuple(warnings))


def cause(net: NcclNetwork, environ: MutableMapping[str, str]) -> str | None:
    """Why this is not NCCL over aws-ofi-nccl's EFA provider with every EFA device of the instance,
    or None when it is."""
    if net.on_ofi and net.provider == EFA_PROVIDER:
        return _missing_nics(net, environ)
    evidence = net.plugin_missing or (net.warnings[0] if net.warnings else None)
    detail = f" ({evidence})" if evidence else ""
    if net.on_ofi:
        return (f"aws-ofi-nccl selected libfabric provider {net.provider or 'unknown'}, not {EFA_PROVIDER} "
                f"(FI_PROVIDER={environ.get('FI_PROVIDER', 'unset')}){detail}")
    if net.network is not None:
        return (f"NCCL fell back to {net.network} instead of the aws-ofi-nccl plugin: traffic would go over "
                f"TCP, not EFA{detail}; check NCCL_NET_PLUGIN={environ.get('NCCL_NET_PLUGIN', 'unset')} and "
                "that libnccl-net-ofi.so is on LD_LIBRARY_PATH")
    if net.plugin_missing:
        return (f"NCCL could not load the aws-ofi-nccl plugin{detail}; check NCCL_NET_PLUGIN="
                f"{environ.get('NCCL_NET_PLUGIN', 'unset')} and that libnccl-net-ofi.so is on LD_LIBRARY_PATH")
    if evidence:
        return (f"NCCL could not start the {environ.get('NCCL_NET', OFI_NCCL_NET)} network{detail}; "
                "are the pod's vpc.amazonaws.com/efa devices (/dev/infiniband) present?")
    return None


def _missing_nics(net: NcclNetwork, environ: MutableMapping[str, str]) -> str | None:
    expected = expected_nics(environ)
    if expected is None:
        return None
    instance, count = expected
    if net.nics is None:
        return (f"aws-ofi-nccl logged no NIC count ('found N nics'), so all {count} EFA devices of "
                f"{instance} cannot be confirmed")
    if net.nics < count:
        return (f"aws-ofi-nccl found {net.nics} EFA NICs, {instance} has {count}: this pod trains at about "
                f"{net.nics}/{count} of the node's network bandwidth; check that the pod got "
                f"vpc.amazonaws.com/efa: {count} and the node's EFA devices (ops doctor)")
    return None


class NotOnEfa(RuntimeError):
    """NCCL is not running over EFA on a node group that has it; the worker must stop."""


def confirm(log: Path, environ: MutableMapping[str, str], *, init_error: BaseException | None = None,
            force: Callable[[], None] | None = None) -> str:
    """The CHECK_PASSED line, or NotOnEfa naming the cause.

    After a failed init (init_error), NotOnEfa is raised only when NCCL's log shows a network
    problem; otherwise this returns "" and the caller re-raises the original error. `force` runs a
    collective when NCCL has not logged its network yet (a lazily created communicator)."""
    net = parse(_read(log))
    if net.network is None and init_error is None and force is not None:
        force()
        net = parse(_read(log))
    why = cause(net, environ)
    if why is not None:
        raise NotOnEfa(f"{CHECK_FAILED} {why} [NCCL log: {log}]")
    if init_error is not None:
        return ""
    if net.network is None:
        raise NotOnEfa(f"{CHECK_FAILED} NCCL logged no 'Using network' line, so EFA cannot be confirmed "
                       f"[NCCL log: {log}]")
    expected = expected_nics(environ)
    nics = net.nics is not None and (f"{net.nics} of {expected[1]} NICs of {expected[0]}" if expected
                                     else f"{net.nics} NICs")
    extra = ", ".join(p for p in (net.fabric and f"fabric {net.fabric}", nics) if p)
    return (f"{CHECK_PASSED} NCCL network {net.network}, libfabric provider {net.provider}"
            + (f" ({extra})" if extra else "") + f" [NCCL log: {log}]")


def _read(log: Path) -> str:
    try:
        return log.read_text(errors="replace")
    except FileNotFoundError:
        return ""
