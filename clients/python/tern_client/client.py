"""The Tern API client: the generated ``tern_api.Client`` (openapi-python-client, from
shared/tern-api/openapi.json) with every request SigV4-signed."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

import httpx
from botocore.credentials import Credentials
from tern_api import AuthenticatedClient
from tern_api.models.problem import Problem
from tern_api.types import Response

from .auth import SigV4HttpxAuth


#: Most characters of a non-problem error body kept as the problem's ``detail``.
MAX_DETAIL_CHARS = 1000


class ProblemTransport(httpx.BaseTransport):
    """Makes every error answer (4xx, 5xx) a problem document, so a caller always gets a
    :class:`TernApiError` with a ``problem``: an answer that is not one (API Gateway's own
    ``{"message": "Forbidden"}`` for a bad signature, a proxy's HTML 502) becomes the
    problem RFC 9457 §4.2.1 means by a missing type: ``type`` ``about:blank``, the status's
    title, and the body's ``message`` (or its first characters) as ``detail``. A problem
    document is passed through as it came."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self._inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        if response.status_code < 400:
            return response
        body = response.read()
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and all(
            isinstance(doc.get(k), t)
            for k, t in (("type", str), ("title", str), ("status", int), ("detail", str))
        ):
            return response
        if isinstance(doc, dict) and isinstance(doc.get("message"), str):
            detail = doc["message"]
        else:
            detail = body.decode("utf-8", "replace").strip()
        try:
            title = HTTPStatus(response.status_code).phrase
        except ValueError:
            title = f"HTTP {response.status_code}"
        problem = {
            "type": "about:blank",
            "title": title,
            "status": response.status_code,
            "detail": detail[:MAX_DETAIL_CHARS] or title,
        }
        headers = [
            (k, v)
            for k, v in response.headers.items()
            if k.lower() not in ("content-type", "content-length", "content-encoding")
        ]
        headers.append(("content-type", "application/problem+json"))
        return httpx.Response(
            response.status_code,
            headers=headers,
            content=json.dumps(problem).encode(),
            request=request,
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._inner.close()


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
    transport = ProblemTransport(httpx_args.pop("transport", None) or httpx.HTTPTransport())
    return AuthenticatedClient(
        base_url=base_url.rstrip("/"),
        token="AWS4-HMAC-SHA256 (signed per request)",
        prefix="",
        timeout=httpx.Timeout(timeout_seconds),
        httpx_args={
            "auth": SigV4HttpxAuth(region, credentials),
            "transport": transport,
            **httpx_args,
        },
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
    if problem is None:
        # A status the document does not list for this operation (a proxy's 502): the
        # body is a problem all the same (ProblemTransport).
        try:
            problem = Problem.from_dict(json.loads(response.content))
        except (ValueError, KeyError, TypeError):
            problem = None
    raise TernApiError(int(response.status_code), problem)
