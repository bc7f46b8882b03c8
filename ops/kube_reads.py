"""Reads of the Kubernetes API for the reports (doctor, preflight): one line per failure, naming the read.

A report reads many objects and must answer in one line whatever the API says: `call` turns an API
failure into OpsError naming what was being read; `read` answers None where the object does not
exist (404), which a report shows as its own finding ("not found") rather than an error.
"""

from __future__ import annotations

from typing import Any, Callable

from ops.errors import OpsError
from ops.kube import READ_TIMEOUT_S, api_error_line  # noqa: F401 (READ_TIMEOUT_S: the reports pass it per call)


def call(fn: Callable[[], Any], what: str) -> Any:
    """fn(); an API failure is OpsError: `<what>: HTTP <status> <message>`."""
    return _answer(fn, what, missing_ok=False)


def read(fn: Callable[[], Any], what: str) -> Any:
    """fn(), or None when the API answers 404; any other failure as `call`."""
    return _answer(fn, what, missing_ok=True)


def _answer(fn: Callable[[], Any], what: str, *, missing_ok: bool) -> Any:
    from kubernetes.client.exceptions import ApiException

    try:
        return fn()
    except ApiException as err:
        if missing_ok and err.status == 404:
            return None
        raise OpsError(f"{what}: {api_error_line(err)}") from None


def list_objects(api_client: Any, group: str, version: str, plural: str, what: str, *,
                 namespace: str | None = None, **query: Any) -> list[dict]:
    """The items of a list, as plain dicts (the client's models refuse some answers real servers
    give, for example an EndpointSlice without endpoints); [] where the API is not served."""
    from kubernetes.client import CustomObjectsApi

    api = CustomObjectsApi(api_client)
    query["_request_timeout"] = READ_TIMEOUT_S

    def fn() -> Any:
        if namespace is None:
            return api.list_cluster_custom_object(group, version, plural, **query)
        return api.list_namespaced_custom_object(group, version, namespace, plural, **query)
    return (read(fn, what) or {}).get("items") or []
