"""What the tests of our project-written CRDs share: a compact structural schema checked against
upstream's full one (every declared field upstream's, with its types, enums, defaults and rules;
nothing upstream declares left out where ours is not open), and the pruning a structural schema does
to what it stores."""

from __future__ import annotations

PRESERVE = "x-kubernetes-preserve-unknown-fields"
# What a field's schema says beyond its children, compared with upstream's wherever we declare it.
FACETS = ("type", "enum", "default", "format", "minimum", "maximum", "maxItems", "minLength", "maxLength",
          "minProperties", "required",
          "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-validations")


def narrower_than_upstream(ours: dict, upstream: dict, path: str = "") -> list[str]:
    """Where our schema declares a field differently from upstream, or declares one upstream lacks.
    Below a node that keeps unknown fields, ours declares nothing and so restricts nothing."""
    problems = [f"{path or '/'}: {facet} ours {ours.get(facet)!r}, upstream {upstream.get(facet)!r}"
                for facet in FACETS if facet in ours and ours.get(facet) != upstream.get(facet)]
    if ours.get(PRESERVE):
        return problems
    if "properties" in ours:
        mine, theirs = set(ours["properties"]), set(upstream.get("properties", {}))
        problems += [f"{path}/{name}: not an upstream field" for name in sorted(mine - theirs)]
        problems += [f"{path}/{name}: upstream field missing (it would be pruned)" for name in sorted(theirs - mine)]
        for name in sorted(mine & theirs):
            problems += narrower_than_upstream(ours["properties"][name], upstream["properties"][name], f"{path}/{name}")
    if "items" in ours:
        problems += narrower_than_upstream(ours["items"], upstream["items"], f"{path}[]")
    return problems


def pruned(schema: dict, value):
    """`value` as a structural schema stores it: unknown fields of declared objects dropped."""
    if isinstance(value, dict) and not schema.get(PRESERVE) and "properties" in schema:
        return {k: pruned(schema["properties"][k], v) for k, v in value.items() if k in schema["properties"]}
    if isinstance(value, list) and "items" in schema:
        return [pruned(schema["items"], v) for v in value]
    return value
