"""Service Quotas reads: the applied value when there is one, else the AWS default."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ops.aws import api_failure_types, error_code, explain
from ops.checks import FAIL, PASS, WARN, Check


@dataclass(frozen=True)
class QuotaReading:
    value: float
    source: str  # "applied" or "AWS default"


def read_quota(quotas: Any, service: str, code: str) -> QuotaReading:
    """GetServiceQuota answers NoSuchResource for a quota never adjusted in some regions; the
    default then is the value that applies."""
    try:
        return QuotaReading(quotas.get_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]["Value"],
                            "applied")
    except api_failure_types() as err:
        if error_code(err) != "NoSuchResourceException":
            raise
    quota = quotas.get_aws_default_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]
    return QuotaReading(quota["Value"], "AWS default")


def quota_row(name: str, quotas: Any, quota: tuple[str, str], *, need: int, in_use: int, what: str,
              note: str = "") -> Check:
    """Pass when `need` more fit beside `in_use`; fail when they do not; warn when unreadable."""
    service, code = quota
    try:
        reading = read_quota(quotas, service, code)
    except api_failure_types() as err:
        return Check(name, WARN, f"could not read {service} {code}: {explain(err)}")
    detail = f"need {need} {what}, {in_use} in use, quota {reading.value:g} ({reading.source})"
    if need + in_use <= reading.value:
        return Check(name, PASS, detail)
    if note:
        # e.g. a re-deploy of an existing cluster needs no new one: say so instead of failing.
        return Check(name, WARN, f"{detail}; {note}")
    return Check(name, FAIL, f"{detail}: request an increase")
