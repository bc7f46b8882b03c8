"""What `--set KEY=VALUE` (ops submit) and a chart's per-preset overrides may change in a job.

One table: k8s/pods/pytorchjob.py checks each value's type against it and `ops submit --help` prints it,
so the help cannot drift from what the renderer accepts. The range rules themselves are checked
in k8s.pods.pytorchjob.job_spec, which names the field when a value is out of range.
"""

from __future__ import annotations

from dataclasses import dataclass

from config.presets import RENDEZVOUS_BACKENDS


@dataclass(frozen=True)
class Override:
    type: type
    allowed: str
    example: str  # a `--set` value the dev environment's llama3-8b-fsdp accepts (tests render it)


OVERRIDES: dict[str, Override] = {
    "nodegroup": Override(str, "a training node group of the environment", "p5"),
    "nodes_min": Override(int, "1 to nodes_max", "1"),
    "nodes_max": Override(int, "nodes_min to the node group's maxSize", "2"),
    "nproc_per_node": Override(int, "1 to the instance's GPUs (1 on a CPU group)", "4"),
    "rendezvous": Override(str, " or ".join(RENDEZVOUS_BACKENDS), RENDEZVOUS_BACKENDS[-1]),
    "max_restarts": Override(int, "0 to (2**31 - 2) // nodes_max (backoffLimit, an int32)", "5"),
    "env": Override(dict, "a plain variable, repeatable; names with TOKEN, SECRET or PASSWORD are "
                          "refused (use a Secret)", "LOGLEVEL=DEBUG"),
}


def help_lines() -> list[str]:
    """`ops submit --help`: one line per key with the values it takes."""
    width = max(len(key) for key in OVERRIDES)
    lines = []
    for key, rule in OVERRIDES.items():
        shown, kind = ("env.NAME", "str") if rule.type is dict else (key, rule.type.__name__)
        lines.append(f"  {shown:<{width}}  {kind:<3}  {rule.allowed}")
    return lines
