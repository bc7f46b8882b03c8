"""`dataSources`: datasets the data-preparation Job puts onto FSx, one entry per name.

    "dataSources": {"imagenet": {"s3Uri": "s3://bucket/imagenet/", "prepare": "imagenet"}}

- s3Uri (required): the S3 prefix to read. The Job's Pod Identity role may list and read that
  prefix of that bucket, nothing else.
- fsxPath (default /fsx/data/NAME): where the prepared dataset lands, what the jobs read.
- prepare: `none` (the copy is the dataset), `imagenet` (`trainer.data imagenet`: the ILSVRC2012
  release into ImageFolder) or `tokens` (`trainer.data prepare`: text into token shards, with
  `tokenizer`, a tokenizer.json or a Hugging Face model directory on FSx, and `textField`).
- nodegroup (default: the first CPU node group) and workers (parallel downloads).

With prepare, the S3 copy goes to /fsx/sources/NAME and the prepared data to fsxPath. When the
environment's FSx imports the source (fsx.s3ImportPath at or above s3Uri: a data repository
association), FSx already shows the objects under /fsx/data/..., so nothing is copied and S3
access is not needed.
"""

from __future__ import annotations

from dataclasses import dataclass

from config.kubernetes import FSX_MOUNT_PATH

PREPARE_STEPS = ("none", "imagenet", "tokens")
# The file-system directory the storage stack links fsx.s3ImportPath to (stacks/storage.py).
FSX_IMPORT_DIR = "/data"
SOURCES_DIR = f"{FSX_MOUNT_PATH}/sources"


@dataclass(frozen=True)
class DataSource:
    name: str
    bucket: str
    prefix: str  # "" (the whole bucket) or ending in "/"
    fsx_path: str
    prepare: str
    nodegroup: str
    workers: int = 32
    tokenizer: str | None = None
    text_field: str = "text"
    linked_path: str | None = None  # where FSx shows the prefix through its S3 link, if it does

    @property
    def s3_uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    @property
    def service_account(self) -> str:
        """The ServiceAccount the data Job runs as; its EKS Pod Identity role reads the prefix."""
        return f"data-{self.name}"

    @property
    def copies(self) -> bool:
        return self.linked_path is None

    @property
    def raw_path(self) -> str:
        """Where the objects are on FSx, as S3 holds them: the linked folder, or the copy's."""
        if self.linked_path:
            return self.linked_path
        return self.fsx_path if self.prepare == "none" else f"{SOURCES_DIR}/{self.name}"
