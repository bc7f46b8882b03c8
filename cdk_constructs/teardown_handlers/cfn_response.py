"""The CloudFormation custom-resource reply: PUT a JSON body to the pre-signed ResponseURL.

Used by handlers that are their own service token (no provider framework Lambda in between).
"""

from __future__ import annotations

import json
import urllib.request


def send(event: dict, status: str, reason: str, physical_id: str, data: dict | None = None) -> None:
    body = json.dumps({
        "Status": status,
        "Reason": reason[:1024],
        "PhysicalResourceId": physical_id,
        "StackId": event["StackId"],
        "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"],
        "Data": data or {},
    }).encode()
    request = urllib.request.Request(event["ResponseURL"], data=body, method="PUT",
                                     headers={"Content-Type": "", "Content-Length": str(len(body))})
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()


def run(event: dict, context, on_delete, *, failure_fails_delete: bool = False, on_update=None) -> None:
    """Reply SUCCESS to Create at once; on Delete run `on_delete(event)` and reply with what it
    found. By default SUCCESS whatever happened: a clean-up helper must never be the reason a
    stack fails to delete. With `failure_fails_delete` (a step that protects data), a failure
    replies FAILED with its reason, which stops the delete. Update replies SUCCESS at once unless
    `on_update` is given: then it runs, and its failure replies FAILED (CloudFormation rolls the
    update back), since a guard that let a refused update through would guard nothing."""
    physical_id = event.get("PhysicalResourceId") or event["LogicalResourceId"]
    status, reason = "SUCCESS", "nothing to do"
    step = {"Delete": on_delete, "Update": on_update}.get(event["RequestType"])
    if step is not None:
        try:
            reason = step(event)
        except Exception as err:  # noqa: BLE001 - reported to CloudFormation, never raised
            if failure_fails_delete or event["RequestType"] == "Update":
                status, reason = "FAILED", f"{type(err).__name__}: {err}"
            else:
                reason = f"teardown step failed, continuing: {type(err).__name__}: {err}"
        print(reason)
    send(event, status, reason, physical_id)
