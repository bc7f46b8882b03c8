"""`ops data --env ENV --source NAME`: a data source's preparation Job (S3 to FSx, then prepare),
created and followed (ops/data.py)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ops.arguments import EnvOptions, KubeOptions, image_reference
from ops.errors import EXIT_PROBLEM

HELP = "start a data source's preparation Job (S3 to FSx, then prepare) and follow it"


@dataclass(frozen=True, kw_only=True)
class Options(EnvOptions, KubeOptions):
    source: str
    image: str | None = None
    dry_run: bool = False
    no_follow: bool = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    EnvOptions.add_to(parser)
    parser.add_argument("--source", required=True, help="a name under the environment's dataSources")
    parser.add_argument("--image", type=image_reference, help="trainer image URI (default: the CPU image the environment's Registry stack "
                                        "published)")
    parser.add_argument("--dry-run", action="store_true", help="print the Job, create nothing")
    parser.add_argument("--no-follow", action="store_true", help="create the Job and return")
    KubeOptions.add_to(parser)


def run(options: Options) -> int:
    from ops import data, images

    env = options.environment()
    data.source(env, options.source)  # an unknown source is one line before any AWS call
    manifest = data.render(env, options.source, image=options.image or images.published_image(env, "cpu"))
    if options.dry_run:
        import yaml

        print(yaml.safe_dump(manifest, sort_keys=False), end="")
        return 0
    api = options.api_client()
    name = data.start(api, manifest)
    namespace = manifest["metadata"]["namespace"]
    print(f"created Job {namespace}/{name}")
    return 0 if options.no_follow else (EXIT_PROBLEM if data.follow(api, name, namespace) else 0)
