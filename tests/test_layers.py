"""Imports run one way (shared/ARCHITECTURE.md): config <- k8s/pods <- k8s/addons <- stacks, and
config <- k8s/pods <- ops. Read from the source with `ast`, so every import counts: module level,
inside functions, and type-only ones under TYPE_CHECKING."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
PROJECT = ("app", "bench", "cdk_constructs", "config", "k8s", "ops", "stacks", "trainer")


def is_module(name: str) -> bool:
    path = REPO_ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports(path: Path) -> set[str]:
    return imports_in(path.read_text(), ".".join(path.relative_to(REPO_ROOT).parts[:-1]))


def imports_in(source: str, package: str) -> set[str]:
    """Every project module `source`, a module of `package`, imports; `from a import b` counts as
    a.b where b is a module."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if is_module(f"{base}.{alias.name}") else base)
    return {name for name in found if name.split(".")[0] in PROJECT}


def sources(folder: str) -> list[Path]:
    return sorted(REPO_ROOT.joinpath(folder).rglob("*.py"))


def within(name: str, *allowed: str) -> bool:
    return any(name == a or name.startswith(a + ".") for a in allowed)


# folder -> the project modules its files may import (each prefix with its submodules).
RULES = {
    "k8s/pods": ("config", "k8s.pods"),
    "k8s/addons": ("config", "k8s.pods", "k8s.addons"),
}


@pytest.mark.parametrize("folder", sorted(RULES))
def test_a_layer_imports_only_the_layers_below_it(folder):
    allowed = RULES[folder]
    wrong = {f"{path.relative_to(REPO_ROOT)}: {name}" for path in sources(folder) for name in imports(path)
             if not within(name, *allowed) and name != "k8s"}
    assert not wrong, f"{folder} may import only {', '.join(allowed)}; found {sorted(wrong)}"


def test_k8s_pods_render_dicts_without_cdk8s():
    """CDK, dist/ and ops render the same pods: the pods are plain dicts, no construct library."""
    for path in sources("k8s/pods"):
        tree = ast.parse(path.read_text())
        names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        names |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not {n for n in names if n.split(".")[0] in ("cdk8s", "cdk8s_plus_27", "constructs", "aws_cdk")}, path


def test_ops_takes_from_k8s_only_the_pods():
    wrong = {f"{path.relative_to(REPO_ROOT)}: {name}" for path in sources("ops") for name in imports(path)
             if within(name, "k8s") and not within(name, "k8s.pods")}
    assert not wrong, f"ops imports k8s beyond k8s.pods: {sorted(wrong)}"


def test_the_import_reader_sees_every_kind_of_import():
    """The rules above can fail: a type-only import, a function-level one, `from k8s import x` and a
    relative one are each seen."""
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from k8s.charts import addons\n"
              "def f():\n    from k8s import sinks\n    import k8s.addons.etcd\n    from ..addons import etcd\n")
    assert imports_in(source, "k8s.pods") == {"k8s.charts", "k8s.sinks", "k8s.addons.etcd"}
