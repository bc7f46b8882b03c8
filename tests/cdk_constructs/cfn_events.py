"""CloudFormation custom-resource events and Lambda contexts for the handler tests."""

from __future__ import annotations


class Context:
    """A Lambda context with `remaining_ms` left: 65 s leaves the handlers five seconds of work
    after the minute they keep back for their reply."""

    def __init__(self, remaining_ms: int = 65_000):
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def event(url: str, request_type: str, **properties) -> dict:
    return {"RequestType": request_type, "ResponseURL": url, "StackId": "arn:stack", "RequestId": "r1",
            "LogicalResourceId": "Janitor", "PhysicalResourceId": "Janitor", "ResourceProperties": properties}
