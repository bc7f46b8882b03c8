"""The import layering of shared/ARCHITECTURE.md, read from the source: config at the bottom,
cdk_constructs on config only, stacks on the layers below it, the trainer image on config only.

Every import counts, wherever it stands: inside a function, under `if TYPE_CHECKING:`, relative
ones resolved. A layer is the longest dotted name in LAYERS that a module's name starts with, so
a part of a package (k8s.pods, say) can become a layer of its own by adding it there and a rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("app", "bench", "cdk_constructs", "config", "k8s", "k8s.addons", "k8s.pods", "ops", "stacks", "trainer")
# layer -> the layers of ours its modules may import (its own included). k8s/pods builds every pod
# as a plain dict, k8s/addons wraps them per add-on, k8s (charts, sinks) makes cdk8s charts of them;
# ops renders the same pods from k8s.pods alone.
MAY_IMPORT = {
    "config": {"config"},
    "cdk_constructs": {"config", "cdk_constructs"},
    "k8s.pods": {"config", "k8s.pods"},
    "k8s.addons": {"config", "k8s.pods", "k8s.addons"},
    "k8s": {"config", "k8s.pods", "k8s.addons", "k8s"},
    "stacks": {"config", "cdk_constructs", "k8s", "k8s.addons", "k8s.pods", "stacks"},
    "ops": {"config", "k8s.pods", "ops"},
    "trainer": {"config", "trainer"},
}


def layer_of(module: str) -> str | None:
    matches = [layer for layer in LAYERS if module == layer or module.startswith(layer + ".")]
    return max(matches, key=len) if matches else None


def module_name(path: Path, root: Path = REPO_ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, root: Path = REPO_ROOT) -> list[tuple[int, str]]:
    """(line, module) of every import in `path` (a file below `root`), relative ones made absolute."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from pkg import module` imports pkg.module when it is one: count both.
            found += [(node.lineno, base)] + [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def modules_of(layer: str) -> list[Path]:
    root = REPO_ROOT.joinpath(*layer.split("."))
    files = sorted(root.rglob("*.py")) if root.is_dir() else [root.with_suffix(".py")]
    return [f for f in files if layer_of(module_name(f)) == layer]


@pytest.mark.parametrize("layer", sorted(MAY_IMPORT))
def test_each_layer_imports_only_the_layers_below_it(layer):
    files = modules_of(layer)
    assert files, f"no modules found for layer {layer}"
    crossings: dict[str, str] = {}  # file:line -> the module it imports across the layers
    for path in files:
        for line, module in imported_modules(path):
            target = layer_of(module)
            if target is not None and target not in MAY_IMPORT[layer]:
                crossings[f"{path.relative_to(REPO_ROOT)}:{line}"] = module
    assert not crossings, "\n".join(f"{where} imports {module}" for where, module in crossings.items())


def test_k8s_pods_render_dicts_without_a_construct_library():
    """CDK, dist/ and ops render the same pods: k8s/pods builds plain dicts, no cdk8s."""
    for path in modules_of("k8s.pods"):
        found = {module.split(".")[0] for _, module in imported_modules(path)}
        assert not found & {"cdk8s", "cdk8s_plus_27", "constructs", "aws_cdk"}, path


def test_an_import_across_the_layers_is_found_wherever_it_stands(tmp_path):
    """The reader itself: a type-only import, one inside a function and a relative one all count."""
    package = tmp_path / "config"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "sample.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from k8s.charts import ChartEntry\n"
        "def f():\n    import trainer.cli\n"
        "from . import reader\n")
    modules = {module for _, module in imported_modules(package / "sample.py", tmp_path)}
    assert {"k8s.charts", "trainer.cli", "config.reader"} <= modules
    assert {layer_of(m) for m in modules} >= {"k8s", "trainer", "config"}


# Layers whose modules import each other without a circle: every layer.
ACYCLIC = ("config", "cdk_constructs", "stacks", "k8s.pods", "k8s.addons", "trainer", "ops")


def import_circle(layer: str) -> list[str] | None:
    """One circle of imports among the modules of `layer`, type-only imports included, or None."""
    names = {module_name(path): path for path in modules_of(layer)}
    edges = {name: {m for _, m in imported_modules(path) if m in names and m != name} for name, path in names.items()}
    state: dict[str, str] = {}

    def visit(name: str, trail: list[str]) -> list[str] | None:
        state[name] = "open"
        for nxt in sorted(edges[name]):
            if state.get(nxt) == "open":
                return trail[trail.index(nxt):] + [name, nxt] if nxt in trail else [name, nxt]
            if nxt not in state and (circle := visit(nxt, trail + [name])):
                return circle
        state[name] = "done"
        return None

    for name in sorted(names):
        if name not in state and (circle := visit(name, [])):
            return circle
    return None


@pytest.mark.parametrize("layer", ACYCLIC)
def test_no_two_modules_of_a_layer_import_each_other_in_a_circle(layer):
    circle = import_circle(layer)
    assert circle is None, " -> ".join(circle)
