"""Render a Helm chart template offline, for the subset of Go-template syntax the upstream charts
we compare against use: {{ .Values.x }}, $ and ., if/with/range/end, whitespace trimming, and the
pipeline functions toYaml, nindent, indent, default, quote, not and fail. `include` resolves the
chart's standard helpers (name, fullname, labels, selectorLabels, serviceAccountName) with the logic
of the scaffolded _helpers.tpl; a chart whose selectorLabels differ says so (`selector_labels`). Anything else raises, so an upstream template that grows a construct this does not
know fails the test loudly instead of rendering something else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

_ACTION = re.compile(r"\{\{(-?)(.*?)(-?)\}\}", re.S)


@dataclass
class _Node:
    kind: str  # "text", "expr", "if", "with", "range"
    value: str = ""
    children: list["_Node"] = field(default_factory=list)


def _tokens(template: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos, trim_next = 0, False
    for match in _ACTION.finditer(template):
        text = template[pos:match.start()]
        if trim_next:
            text = text.lstrip()
        if match.group(1):
            text = text.rstrip()
        out.append(("text", text))
        out.append(("action", match.group(2).strip()))
        trim_next = bool(match.group(3))
        pos = match.end()
    tail = template[pos:]
    out.append(("text", tail.lstrip() if trim_next else tail))
    return out


def _parse(template: str) -> list[_Node]:
    root: list[_Node] = []
    stack: list[list[_Node]] = [root]
    for kind, value in _tokens(template):
        if kind == "text":
            stack[-1].append(_Node("text", value))
            continue
        if value.startswith("/*"):
            continue
        word, _, rest = value.partition(" ")
        if word in ("if", "with", "range"):
            node = _Node(word, rest.strip())
            stack[-1].append(node)
            stack.append(node.children)
        elif word == "end":
            stack.pop()
        elif word in ("else", "define", "template", "block") or ":=" in value:
            raise NotImplementedError(f"template construct not supported here: {{{{ {value} }}}}")
        else:
            stack[-1].append(_Node("expr", value))
    if len(stack) != 1:
        raise ValueError("unbalanced {{ end }} in template")
    return root


def _truthy(value: Any) -> bool:
    return value not in (None, False, 0, "", [], {})


class Chart:
    """One chart: its metadata (Chart.yaml), values and a release name."""

    def __init__(self, chart: dict, values: dict, release: str, namespace: str = "default",
                 selector_labels: str | None = None):
        self.selector_labels = selector_labels
        self.root = {"Chart": {"Name": chart["name"], "Version": chart["version"],
                               "AppVersion": chart.get("appVersion", "")},
                     "Values": values, "Release": {"Name": release, "Namespace": namespace, "Service": "Helm"}}

    def render(self, template: str) -> list[dict]:
        text = self._render(_parse(template), self.root)
        return [doc for doc in yaml.safe_load_all(text) if doc]

    # helpers ---------------------------------------------------------------------------------
    def _name(self) -> str:
        return (self.root["Values"].get("nameOverride") or self.root["Chart"]["Name"])[:63].rstrip("-")

    def _fullname(self) -> str:
        values, release = self.root["Values"], self.root["Release"]["Name"]
        if values.get("fullnameOverride"):
            return values["fullnameOverride"][:63].rstrip("-")
        name = values.get("nameOverride") or self.root["Chart"]["Name"]
        return (release if name in release else f"{release}-{name}")[:63].rstrip("-")

    def _include(self, name: str) -> str:
        suffix = name.rsplit(".", 1)[-1]
        chart = self.root["Chart"]
        selector = self.selector_labels or (
            f"app.kubernetes.io/name: {self._name()}\napp.kubernetes.io/instance: {self.root['Release']['Name']}")
        account = self.root["Values"].get("serviceAccount") or {}
        helpers = {
            "name": self._name,
            "fullname": self._fullname,
            "chart": lambda: f"{chart['Name']}-{chart['Version']}".replace("+", "_")[:63].rstrip("-"),
            "selectorLabels": lambda: selector,
            "serviceAccountName": lambda: (account.get("name") or self._fullname()) if account.get("create")
            else (account.get("name") or "default"),
            "labels": lambda: (f"helm.sh/chart: {helpers['chart']()}\n{selector}\n"
                               + (f"app.kubernetes.io/version: \"{chart['AppVersion']}\"\n" if chart["AppVersion"] else "")
                               + "app.kubernetes.io/managed-by: Helm"),
        }
        if suffix not in helpers:
            raise NotImplementedError(f"helper {name} not supported here")
        return helpers[suffix]()

    # evaluation ------------------------------------------------------------------------------
    def _render(self, nodes: list[_Node], dot: Any) -> str:
        out = []
        for node in nodes:
            if node.kind == "text":
                out.append(node.value)
            elif node.kind == "expr":
                value = self._pipeline(node.value, dot)
                out.append("" if value is None else str(value))
            elif node.kind == "if":
                if _truthy(self._pipeline(node.value, dot)):
                    out.append(self._render(node.children, dot))
            elif node.kind == "with":
                value = self._pipeline(node.value, dot)
                if _truthy(value):
                    out.append(self._render(node.children, value))
            elif node.kind == "range":
                for item in self._pipeline(node.value, dot) or []:
                    out.append(self._render(node.children, item))
        return "".join(out)

    def _pipeline(self, expr: str, dot: Any) -> Any:
        stages = [s.strip() for s in expr.split("|")]
        value = self._call(stages[0], dot, None, first=True)
        for stage in stages[1:]:
            value = self._call(stage, dot, value, first=False)
        return value

    def _call(self, stage: str, dot: Any, piped: Any, *, first: bool) -> Any:
        words = re.findall(r'"[^"]*"|\S+', stage)
        head, args = words[0], [self._arg(w, dot) for w in words[1:]]
        if first and head.startswith(("$", ".", '"')):
            return self._arg(head, dot)
        if not first:
            args.append(piped)
        if head == "include":
            return self._include(args[0])
        if head == "toYaml":
            return yaml.safe_dump(args[0], default_flow_style=False, sort_keys=False).rstrip("\n") \
                if args[0] not in (None, {}) else "{}"
        if head in ("nindent", "indent"):
            pad = " " * int(args[0])
            body = "\n".join(pad + line if line else line for line in str(args[1]).split("\n"))
            return ("\n" + body) if head == "nindent" else body
        if head == "default":
            return args[1] if _truthy(args[1]) else args[0]
        if head == "quote":
            return f'"{args[0]}"'
        if head == "not":
            return not _truthy(args[0])
        if head == "fail":
            raise ValueError(f"chart template failed: {args[0]}")
        raise NotImplementedError(f"template function {head!r} not supported here")

    def _arg(self, word: str, dot: Any) -> Any:
        if word.startswith('"'):
            return word[1:-1]
        if word.isdigit():
            return int(word)
        if word == ".":
            return dot
        if word.startswith("$"):
            base, path = self.root, word[1:]
        elif word.startswith("."):
            base, path = dot, word
        else:
            raise NotImplementedError(f"template argument {word!r} not supported here")
        for part in filter(None, path.split(".")):
            base = base.get(part) if isinstance(base, dict) else None
        return base
