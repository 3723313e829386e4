"""The Tern API client: the generated ``tern_api.Client`` (openapi-python-client, from
shared/tern-api/openapi.json) with every request SigV4-signed."""

from __future__ import annotations

from typing import Any

import httpx
from botocore.credentials import Credentials
from tern_api import AuthenticatedClient
from tern_api.models.problem import Problem
from tern_api.types import Response

from .auth import SigV4HttpxAuth


def create_client(
    base_url: str,
    region: str,
    credentials: Credentials | None = None,
    *,
    timeout_seconds: float = 30.0,
    **httpx_args: Any,
) -> AuthenticatedClient:
    """A Tern API client whose every request is signed.

    :param base_url: the stacks' ApiUrl output, or TERN_API_URL from .tern/local.env
    :param region: the API's region (us-east-1 in local mode)
    :param credentials: ``botocore.credentials.Credentials``; default botocore's chain
    :param timeout_seconds: per-request timeout, seconds (default 30, API Gateway's
        integration limit)
    """
    # The generated calls take an AuthenticatedClient (the document's security scheme is
    # the Authorization header). Its fixed header is a placeholder: SigV4HttpxAuth writes
    # each request's own Authorization.
    return AuthenticatedClient(
        base_url=base_url.rstrip("/"),
        token="AWS4-HMAC-SHA256 (signed per request)",
        prefix="",
        timeout=httpx.Timeout(timeout_seconds),
        httpx_args={"auth": SigV4HttpxAuth(region, credentials), **httpx_args},
    )


class TernApiError(RuntimeError):
    """An error answer of the API, with its RFC 9457 problem (``None`` when the body was
    not one)."""

    def __init__(self, status: int, problem: Problem | None) -> None:
        detail = (
            f"{problem.title}: {problem.detail}"
            if problem is not None
            else "no problem document"
        )
        field = (
            problem.field
            if problem is not None and isinstance(problem.field, str)
            else None
        )
        super().__init__(f"{status} {detail}" + (f" (field {field})" if field else ""))
        self.status = status
        self.problem = problem


def unwrap(response: Response[Any]) -> Any:
    """The parsed body of a 2xx answer of a generated ``*.sync_detailed`` call; raises
    :class:`TernApiError` for any other."""
    if 200 <= int(response.status_code) < 300:
        return response.parsed
    problem = response.parsed if isinstance(response.parsed, Problem) else None
    raise TernApiError(int(response.status_code), problem)
