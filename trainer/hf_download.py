"""`python -m trainer.hf_download --repo ID [--revision REV] --out DIR`: a Hugging Face repository
onto FSx, whole or not at all.

The files land in a staging directory beside DIR (`.NAME.partial`) through huggingface_hub's
`snapshot_download`. A completeness marker is written last and the staging directory is then
renamed to DIR, so a reader of DIR (`trainer.llm --init-from-hf`) never sees half a model. A re-run
after an interruption (a killed pod, a Job retry) resumes: files already complete in staging are
checked against the hub's ETag and kept, only the rest are fetched (huggingface_hub keeps no
partial file between processes; within one process it resumes a broken transfer with an HTTP
Range request). DIR holding a completed download of the same repository is success at once.

The token comes from HF_TOKEN (the `hf-token` Secret in the cluster), read by huggingface_hub
itself; it never appears in arguments or output. HF_ENDPOINT points the client at another hub.
Exit 2: bad arguments, no access (gated or missing repository), or DIR taken by something else;
exit 1: any other failure (the Job retries those).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from config.paths import is_dir, output_dir, output_file, refuse_dangling_link
from trainer.cli import Parser, UsageError, checked_path, run_main, write_whole

MARKER = ".download-complete.json"
LOG_EVERY_S = float(os.environ.get("DOWNLOAD_LOG_EVERY_S", "15"))


def staging_dir(out: Path) -> Path:
    """Beside the output, on the same file system, so the final rename is atomic."""
    return out.parent / f".{out.name}.partial"


def completed(out: Path) -> dict | None:
    """The marker of a completed download in `out`, or None."""
    try:
        return json.loads((out / MARKER).read_text())
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None


def _progress_class():
    """A huggingface_hub progress bar that writes plain log lines, at most every LOG_EVERY_S per
    bar and once when it closes: a pod's log is not a terminal, so tqdm's carriage returns would
    either vanish (tqdm disables itself without a TTY) or pile up in one line."""
    from huggingface_hub.utils import tqdm as hf_tqdm

    class LogProgress(hf_tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = False
            kwargs["file"] = open(os.devnull, "w")
            kwargs.update(mininterval=0, miniters=1, ascii=True)  # display() below does the rate limiting
            self._last_log, self._last_line = 0.0, ""
            super().__init__(*args, **kwargs)

        def display(self, msg=None, pos=None):
            now = time.monotonic()
            finished = self.total is not None and self.n >= self.total
            line = " ".join(str(self).split())
            # Reconstruct...: the byte count again, as written to disk; a closing bar repeats its last line.
            if ((now - self._last_log >= LOG_EVERY_S or finished) and line != self._last_line
                    and not str(self.desc).startswith("Reconstruct")):
                self._last_log, self._last_line = now, line
                print(f"progress: {line}", flush=True)
            return True

    return LogProgress


def download(repo: str, revision: str, out: Path) -> dict:
    """Fetch `repo` at `revision` into `out`; returns the marker. Raises UsageError (exit 2) when
    access is refused or `out` holds something else."""
    import httpx2  # huggingface_hub's HTTP client
    from huggingface_hub import HfApi, constants, snapshot_download
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    done = completed(out)
    if done is not None:
        if done.get("repo") != repo:
            raise UsageError("--out", f"{out} already holds a download of {done.get('repo')}, not {repo}")
        print(f"{out} already holds {repo} at {done.get('commit')} ({done.get('files')} files); nothing to do")
        return done
    if out.exists():
        raise UsageError("--out", f"{out} exists and is not a completed download; move it away first")
    staging = staging_dir(out)
    try:
        info = HfApi().repo_info(repo, revision=revision)
        print(f"downloading {repo} at {revision} (commit {info.sha}) into {staging}", flush=True)
        # The commit, not the branch: a resumed run fetches the same files even if the branch moved.
        snapshot_download(repo, revision=info.sha, local_dir=staging, tqdm_class=_progress_class())
    except GatedRepoError:
        token = "HF_TOKEN is set but its account has not been granted access" if os.environ.get("HF_TOKEN") \
            else "no HF_TOKEN: create the hf-token Secret with `python -m ops model token`"
        raise UsageError("--repo", f"{repo} is gated: {token} (accept the licence on huggingface.co first)") from None
    except RevisionNotFoundError:
        raise UsageError("--revision", f"{repo} has no revision {revision!r}") from None
    except RepositoryNotFoundError:
        raise UsageError("--repo", f"{repo} was not found, or is private and HF_TOKEN cannot read it") from None
    except HfHubHTTPError as err:
        status = err.response.status_code if err.response is not None else "?"
        raise SystemExit(f"error: the hub answered HTTP {status} for {repo}; a re-run resumes") from None
    except httpx2.TransportError as err:  # no answer at all: refused, reset, timed out, a name that does not resolve
        what = " ".join(f"{type(err).__name__}: {err}".split())
        raise SystemExit(f"error: cannot reach the Hugging Face hub at {constants.ENDPOINT} ({what}); a re-run "
                         "resumes") from None
    files = [p for p in staging.rglob("*") if p.is_file() and ".cache" not in p.relative_to(staging).parts]
    marker = {"repo": repo, "revision": revision, "commit": info.sha, "files": len(files),
              "bytes": sum(p.stat().st_size for p in files)}
    # Leftovers of killed attempts: huggingface_hub names its temporary files per process.
    for stale in (staging / ".cache").rglob("*.incomplete"):
        stale.unlink()
    write_whole(staging / MARKER, json.dumps(marker, indent=1) + "\n")
    os.replace(staging, out)
    print(f"complete: {repo} at {info.sha} in {out} ({marker['files']} files, {marker['bytes']} bytes)", flush=True)
    return marker


def main(argv=None) -> int:
    p = Parser(prog="python -m trainer.hf_download", description=__doc__.splitlines()[0])
    p.add_argument("--repo", required=True, help="Hugging Face repository id, e.g. meta-llama/Llama-2-7b-hf")
    p.add_argument("--revision", default="main", help="branch, tag or commit (default main)")
    p.add_argument("--out", required=True, help="directory to create, e.g. /fsx/models/Llama-2-7b-hf")
    args = p.parse_args(argv)
    out = Path(args.out)
    if not out.name or out.name.startswith("."):
        raise UsageError("--out", f"must name a directory that does not start with '.', got {args.out!r}")
    staging = staging_dir(out)
    checked_path("--out", is_dir, out)  # a folder it may not enter would fail the look for a completed download
    checked_path("--out", refuse_dangling_link, out)  # the finished download is renamed onto --out
    if completed(out) is None:  # the staging folder beside --out must be possible before the hub is asked
        checked_path("--out", output_dir if checked_path("--out", is_dir, staging) else output_file, staging)
    download(args.repo, args.revision, out)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
