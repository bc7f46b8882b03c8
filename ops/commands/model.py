"""`ops model token|download|status|logs`: gated Hugging Face models onto FSx (ops/model.py)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from config.kubernetes import HF_TOKEN_SECRET
from ops.arguments import EnvOptions, KubeOptions, image_reference

HELP = "Hugging Face models onto FSx: the token Secret and the download Job"


@dataclass(frozen=True, kw_only=True)
class Options(KubeOptions):
    """One field per flag of any subcommand; those a subcommand lacks keep their defaults."""
    subcommand: str
    env: str | None = None  # token and download: EnvOptions
    context_file: str | None = None
    from_env: str = "HF_TOKEN"
    from_file: str | None = None
    repo: str | None = None
    name: str | None = None
    revision: str = "main"
    image: str | None = None
    dry_run: bool = False
    follow: bool = False

    def environment(self):
        return EnvOptions(env=self.env, context_file=self.context_file).environment()

    def cluster_environment(self):
        """token and download write to --env's cluster (its Secret, its FSx): that cluster only."""
        return self.environment() if self.env else None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="subcommand", required=True, parser_class=type(parser))
    t = sub.add_parser("token", help=f"create or replace the {HF_TOKEN_SECRET} Secret (the token is never shown)")
    EnvOptions.add_to(t)
    source = t.add_mutually_exclusive_group()
    source.add_argument("--from-env", default="HF_TOKEN", metavar="VAR", help="environment variable (default HF_TOKEN)")
    source.add_argument("--from-file", metavar="PATH", help="file holding the token")
    KubeOptions.add_to(t)
    d = sub.add_parser("download", help="create the Job fetching a repository to /fsx/models/NAME")
    EnvOptions.add_to(d)
    d.add_argument("--repo", required=True, help="Hugging Face repository id, e.g. meta-llama/Llama-2-7b-hf")
    d.add_argument("--name", help="directory under /fsx/models (default: the repository's name)")
    d.add_argument("--revision", default="main", help="branch, tag or commit (default main)")
    d.add_argument("--image", type=image_reference, help="trainer image URI (default: the CPU image the environment's Registry "
                                   "stack published)")
    d.add_argument("--dry-run", action="store_true", help="print the Job, create nothing")
    KubeOptions.add_to(d)
    s = sub.add_parser("status", help="phase of one model-download Job, or of all")
    s.add_argument("name", nargs="?", help="the model's directory name (or the Job's name)")
    KubeOptions.add_to(s)
    lg = sub.add_parser("logs", help="the download's progress log")
    lg.add_argument("name")
    lg.add_argument("-f", "--follow", action="store_true")
    KubeOptions.add_to(lg)


def run(options: Options) -> int:
    from kubernetes import client

    from ops import model

    if options.subcommand == "token":
        env = options.environment()
        token, source = model.read_token(options.from_env, options.from_file)
        core = client.CoreV1Api(model.api_client(options.kubeconfig, options.context, options.cluster_environment()))
        done = model.put_token(core, options.namespace, token)
        print(f"{done} Secret {options.namespace}/{HF_TOKEN_SECRET} from {source} for {env.name}")
        return 0
    if options.subcommand == "download":
        return _download(options)
    api = model.api_client(options.kubeconfig, options.context, options.cluster_environment())
    if options.subcommand == "status":
        print(model.render_status(model.status(client.BatchV1Api(api), options.namespace, options.name)))
    else:
        model.logs(client.CoreV1Api(api), options.namespace, options.name, follow=options.follow)
    return 0


def _download(options: Options) -> int:
    from kubernetes import client

    from k8s.pods.model_download import ModelDownload, model_download_manifest
    from ops import model
    from ops.images import published_image

    env = options.environment()
    download = ModelDownload.of(options.repo, options.name, options.revision)
    image = options.image or published_image(env, "cpu")
    api = None if options.dry_run else model.api_client(options.kubeconfig, options.context, options.cluster_environment())
    manifest = model_download_manifest(env, download, image=image)
    if options.dry_run:
        import yaml

        print(yaml.safe_dump(manifest, sort_keys=False), end="")
        return 0
    print(model.start(client.BatchV1Api(api), manifest))
    print(f"follow it with `python -m ops model logs {download.name} -f`")
    return 0
