"""`python -m ops.policy_scan --env NAME`: checkov over what an environment deploys, against the
failures we accept (checkov-accepted.yaml: each with its check id, resource and reason).

It scans the environment's synthesized stage, cdk.out/assembly-NAME/ (CloudFormation), and its
Kubernetes objects, dist/NAME/ (both written by `make synth ENV=NAME`). A failure the file does not
accept, or more failures of a framework than its limit there (the counts issue 21 started from),
fails the scan; an acceptance that matches nothing is reported so it can be removed.

Exit 0 when every failure is accepted and within the limits, 1 when not, 2 for a usage problem
(checkov missing, nothing synthesized, an unreadable acceptance file): one line on stderr.
checkov runs in its own virtual environment (`make install`: .venv-checkov), because its
dependencies would change packages the project pins.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from config.kubernetes import EXIT_USAGE
from ops import proc

REPO_ROOT = Path(__file__).resolve().parent.parent
ACCEPTED_FILE = REPO_ROOT / "checkov-accepted.yaml"
CHECKOV = REPO_ROOT / ".venv-checkov" / "bin" / "checkov"
FRAMEWORKS = ("cloudformation", "kubernetes")
CHECKOV_TIMEOUT_S = 600


class ScanError(Exception):
    """A usage problem: the one line to print."""


@dataclass(frozen=True)
class Failure:
    framework: str
    check: str
    resource: str
    file: str
    name: str

    def line(self) -> str:
        return f"{self.check} {self.resource} ({self.framework}, {self.file}): {self.name}"


@dataclass(frozen=True)
class Acceptance:
    check: str
    resource: str  # an fnmatch pattern: logical ids and cdk8s names end in a hash
    reason: str

    def accepts(self, failure: Failure) -> bool:
        return failure.check == self.check and fnmatch.fnmatchcase(failure.resource, self.resource)


def load_acceptances(path: Path = ACCEPTED_FILE) -> tuple[dict[str, int], list[Acceptance]]:
    """(limit per framework, accepted failures) from the acceptance file."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise ScanError(f"{path}: cannot read it ({type(err).__name__})") from None
    if not isinstance(data, dict) or not isinstance(data.get("limits"), dict) or not isinstance(data.get("accepted"), list):
        raise ScanError(f"{path}: expected `limits` (framework -> count) and `accepted` (a list)")
    accepted = []
    for i, entry in enumerate(data["accepted"]):
        if not isinstance(entry, dict) or {"check", "resource", "reason"} - set(entry) \
                or not all(isinstance(entry[k], str) and entry[k].strip() for k in ("check", "resource", "reason")):
            raise ScanError(f"{path}: accepted[{i}] needs non-empty `check`, `resource` and `reason`")
        accepted.append(Acceptance(entry["check"], entry["resource"], entry["reason"]))
    return {k: int(v) for k, v in data["limits"].items()}, accepted


def parse_report(stdout: str, framework: str) -> list[Failure]:
    """checkov's JSON output: one document, a list of them, or several documents in a row."""
    decoder, position, documents = json.JSONDecoder(), 0, []
    text = stdout.strip()
    while position < len(text):
        document, end = decoder.raw_decode(text, position)
        documents += document if isinstance(document, list) else [document]
        position = end
        while position < len(text) and text[position].isspace():
            position += 1
    failures = []
    for report in documents:
        if report.get("check_type") != framework:
            continue
        for check in report.get("results", {}).get("failed_checks", []):
            failures.append(Failure(framework, check["check_id"], check["resource"],
                                    Path(check.get("file_path", "")).name, check.get("check_name", "")))
    return failures


def run_checkov(checkov: Path, framework: str, directory: Path) -> list[Failure]:
    try:
        result = proc.run(
            [str(checkov), "--quiet", "--compact", "--output", "json", "--framework", framework,
             "--directory", str(directory)], timeout=CHECKOV_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ScanError(f"checkov did not finish {framework} in {directory} within {CHECKOV_TIMEOUT_S} s") from None
    # checkov exits 1 when a check failed; anything else without JSON is checkov itself failing.
    if result.returncode not in (0, 1) or not result.stdout.strip().startswith(("{", "[")):
        raise ScanError(f"checkov failed on {directory} (exit {result.returncode}): "
                        f"{(result.stderr or result.stdout).strip().splitlines()[-1:] or ['no output']}")
    return parse_report(result.stdout, framework)


@dataclass
class Verdict:
    failures: list[Failure]
    unaccepted: list[Failure]
    over_limit: dict[str, tuple[int, int]]  # framework -> (count, limit)
    unused: list[Acceptance]

    @property
    def ok(self) -> bool:
        return not self.unaccepted and not self.over_limit


def judge(failures: list[Failure], limits: dict[str, int], accepted: list[Acceptance]) -> Verdict:
    unaccepted = [f for f in failures if not any(a.accepts(f) for a in accepted)]
    counts = {fw: sum(1 for f in failures if f.framework == fw) for fw in FRAMEWORKS}
    over = {fw: (n, limits[fw]) for fw, n in counts.items() if fw in limits and n > limits[fw]}
    unused = [a for a in accepted if not any(a.accepts(f) for f in failures)]
    return Verdict(failures, unaccepted, over, unused)


def scan(env: str, *, checkov: Path = CHECKOV, outdir: Path = REPO_ROOT / "cdk.out",
         dist: Path = REPO_ROOT / "dist", accepted_file: Path = ACCEPTED_FILE) -> Verdict:
    if not checkov.is_file():
        raise ScanError(f"{checkov}: checkov is not installed (make install puts it in .venv-checkov)")
    limits, accepted = load_acceptances(accepted_file)
    targets = {"cloudformation": outdir / f"assembly-{env}", "kubernetes": dist / env}
    for framework, directory in targets.items():
        if not directory.is_dir():
            raise ScanError(f"{directory}: not found; run `make synth ENV={env}` first")
    failures = [f for framework, directory in targets.items() for f in run_checkov(checkov, framework, directory)]
    return judge(failures, limits, accepted)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.policy_scan", description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="dev", help="environment whose cdk.out/assembly-ENV and dist/ENV to scan")
    parser.add_argument("--checkov", type=Path, default=CHECKOV, help="the checkov executable")
    parser.add_argument("--outdir", type=Path, default=REPO_ROOT / "cdk.out", help="cloud assembly directory")
    parser.add_argument("--dist", type=Path, default=REPO_ROOT / "dist", help="dist directory")
    args = parser.parse_args(argv)
    try:
        verdict = scan(args.env, checkov=args.checkov, outdir=args.outdir, dist=args.dist)
    except ScanError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    for framework in FRAMEWORKS:
        found = [f for f in verdict.failures if f.framework == framework]
        refused = [f for f in verdict.unaccepted if f.framework == framework]
        print(f"checkov {framework}: {len(found)} failed, {len(found) - len(refused)} of them accepted "
              f"in {ACCEPTED_FILE.name}")
        for failure in refused:
            print(f"  not accepted: {failure.line()}")
    for framework, (count, limit) in verdict.over_limit.items():
        print(f"checkov {framework}: {count} failures, more than the limit of {limit}")
    for acceptance in verdict.unused:
        print(f"note: {ACCEPTED_FILE.name} accepts {acceptance.check} {acceptance.resource}, which no longer fails: remove it")
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
