"""A small evaluator of the Kubernetes Pod Security Standards (baseline and restricted), for tests.

The controls and their allowed values are those of the "Pod Security Standards" page
(https://kubernetes.io/docs/concepts/security/pod-security-standards/) as Pod Security Admission
implements them for v1.35 (kubernetes/pod-security-admission tag v0.35.0, policy/check_*.go: one
function here per check file). It judges a pod's metadata and spec as the admission plugin would,
and returns one line per violation; the `hostUsers: false` exemptions of 1.35 are left out, so it
is stricter than the API server for user-namespaced pods and exact for the pods we render.
"""

from __future__ import annotations

from typing import Callable, Iterator

LEVELS = ("privileged", "baseline", "restricted")

# check_capabilities_baseline.go: the container runtime's default set.
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
# check_sysctls.go, the v1.32+ list.
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}
# check_seLinuxOptions.go
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
# check_restrictedVolumes.go: the only inline volume sources restricted allows.
RESTRICTED_VOLUME_SOURCES = {"configMap", "downwardAPI", "emptyDir", "projected", "secret", "csi",
                             "persistentVolumeClaim", "ephemeral", "image"}
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def _containers(spec: dict) -> Iterator[dict]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _contexts(spec: dict) -> Iterator[tuple[str, dict]]:
    for container in _containers(spec):
        yield container["name"], container.get("securityContext") or {}


def _host_namespaces(meta: dict, spec: dict) -> list[str]:
    return [f"spec.{f}=true" for f in ("hostNetwork", "hostPID", "hostIPC") if spec.get(f)]


def _windows_host_process(meta: dict, spec: dict) -> list[str]:
    found = [n for n, c in _contexts(spec) if (c.get("windowsOptions") or {}).get("hostProcess")]
    pod = ((spec.get("securityContext") or {}).get("windowsOptions") or {}).get("hostProcess")
    return [f"hostProcess: {', '.join(found) or 'pod'}"] if found or pod else []


def _privileged(meta: dict, spec: dict) -> list[str]:
    return [f"{n}: privileged" for n, c in _contexts(spec) if c.get("privileged")]


def _capabilities_baseline(meta: dict, spec: dict) -> list[str]:
    return [f"{n}: adds {sorted(set(added) - BASELINE_CAPABILITIES)}" for n, c in _contexts(spec)
            if set(added := (c.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES]


def _host_path_volumes(meta: dict, spec: dict) -> list[str]:
    return [f"volume {v['name']}: hostPath" for v in spec.get("volumes") or [] if "hostPath" in v]


def _host_ports(meta: dict, spec: dict) -> list[str]:
    return [f"{c['name']}: hostPort {p['hostPort']}" for c in _containers(spec) for p in c.get("ports") or []
            if p.get("hostPort")]


def _host_probes(meta: dict, spec: dict) -> list[str]:
    bad = []
    for container in _containers(spec):
        handlers = [container.get(p) or {} for p in ("livenessProbe", "readinessProbe", "startupProbe")]
        handlers += [h or {} for h in (container.get("lifecycle") or {}).values()]
        for handler in handlers:
            for kind in ("httpGet", "tcpSocket"):
                if (handler.get(kind) or {}).get("host"):
                    bad.append(f"{container['name']}: {kind}.host")
    return bad


def _app_armor(meta: dict, spec: dict) -> list[str]:
    bad = [f"annotation {k}={v}" for k, v in (meta.get("annotations") or {}).items()
           if k.startswith(APPARMOR_ANNOTATION) and v not in ("", "runtime/default") and not v.startswith("localhost/")]
    profiles = [("pod", (spec.get("securityContext") or {}).get("appArmorProfile"))]
    profiles += [(n, c.get("appArmorProfile")) for n, c in _contexts(spec)]
    bad += [f"{n}: appArmorProfile {p['type']}" for n, p in profiles if p and p.get("type") not in ("RuntimeDefault", "Localhost")]
    return bad


def _se_linux(meta: dict, spec: dict) -> list[str]:
    options = [("pod", (spec.get("securityContext") or {}).get("seLinuxOptions"))]
    options += [(n, c.get("seLinuxOptions")) for n, c in _contexts(spec)]
    return [f"{n}: seLinuxOptions {o}" for n, o in options
            if o and (o.get("type", "") not in SELINUX_TYPES or o.get("user") or o.get("role"))]


def _proc_mount(meta: dict, spec: dict) -> list[str]:
    return [f"{n}: procMount {c['procMount']}" for n, c in _contexts(spec) if c.get("procMount", "Default") != "Default"]


def _seccomp_baseline(meta: dict, spec: dict) -> list[str]:
    profiles = [("pod", (spec.get("securityContext") or {}).get("seccompProfile"))]
    profiles += [(n, c.get("seccompProfile")) for n, c in _contexts(spec)]
    return [f"{n}: seccomp {p['type']}" for n, p in profiles if p and p.get("type") == "Unconfined"]


def _sysctls(meta: dict, spec: dict) -> list[str]:
    return [f"sysctl {s['name']}" for s in (spec.get("securityContext") or {}).get("sysctls") or []
            if s["name"] not in SAFE_SYSCTLS]


def _restricted_volumes(meta: dict, spec: dict) -> list[str]:
    bad = []
    for volume in spec.get("volumes") or []:
        sources = set(volume) - {"name"}
        if not sources <= RESTRICTED_VOLUME_SOURCES:
            bad.append(f"volume {volume['name']}: {sorted(sources - RESTRICTED_VOLUME_SOURCES)}")
    return bad


def _allow_privilege_escalation(meta: dict, spec: dict) -> list[str]:
    return [f"{n}: allowPrivilegeEscalation != false" for n, c in _contexts(spec) if c.get("allowPrivilegeEscalation") is not False]


def _run_as_non_root(meta: dict, spec: dict) -> list[str]:
    pod = (spec.get("securityContext") or {}).get("runAsNonRoot")
    bad = [f"{n}: runAsNonRoot=false" for n, c in _contexts(spec) if c.get("runAsNonRoot") is False]
    if pod is not True:
        bad += [f"{n}: runAsNonRoot unset" for n, c in _contexts(spec) if c.get("runAsNonRoot") is not True]
    return bad


def _run_as_user(meta: dict, spec: dict) -> list[str]:
    users = [("pod", (spec.get("securityContext") or {}).get("runAsUser"))]
    users += [(n, c.get("runAsUser")) for n, c in _contexts(spec)]
    return [f"{n}: runAsUser 0" for n, uid in users if uid == 0]


def _seccomp_restricted(meta: dict, spec: dict) -> list[str]:
    pod = ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
    bad = [] if pod in (None, "RuntimeDefault", "Localhost") else [f"pod: seccomp {pod}"]
    for name, context in _contexts(spec):
        kind = (context.get("seccompProfile") or {}).get("type")
        if kind is None and pod not in ("RuntimeDefault", "Localhost"):
            bad.append(f"{name}: no seccomp profile")
        elif kind not in (None, "RuntimeDefault", "Localhost"):
            bad.append(f"{name}: seccomp {kind}")
    return bad


def _capabilities_restricted(meta: dict, spec: dict) -> list[str]:
    bad = []
    for name, context in _contexts(spec):
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            bad.append(f"{name}: does not drop ALL capabilities")
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            bad.append(f"{name}: adds {sorted(set(capabilities['add']) - {'NET_BIND_SERVICE'})}")
    return bad


Check = Callable[[dict, dict], list[str]]
BASELINE: tuple[Check, ...] = (_host_namespaces, _windows_host_process, _privileged, _capabilities_baseline,
                               _host_path_volumes, _host_ports, _host_probes, _app_armor, _se_linux, _proc_mount,
                               _seccomp_baseline, _sysctls)
RESTRICTED: tuple[Check, ...] = BASELINE + (_restricted_volumes, _allow_privilege_escalation, _run_as_non_root,
                                            _run_as_user, _seccomp_restricted, _capabilities_restricted)


def violations(metadata: dict, spec: dict, level: str) -> list[str]:
    """Why a pod with `metadata` and `spec` does not meet `level` (empty when it does)."""
    if level not in LEVELS:
        raise ValueError(f"unknown Pod Security level {level!r}")
    checks = {"privileged": (), "baseline": BASELINE, "restricted": RESTRICTED}[level]
    return [line for check in checks for line in check(metadata, spec)]
