"""AWS Signature Version 4 for the Tern API, as an httpx ``Auth``: botocore's own
``SigV4Auth`` signs each request for service ``execute-api`` (API Gateway's IAM
authorization in AWS; ``tern local`` checks the same signatures)."""

from __future__ import annotations

from collections.abc import Generator

import httpx
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.session import Session

#: The service name API Gateway signs for.
SERVICE = "execute-api"


class MissingCredentials(RuntimeError):
    """No AWS credentials were given and botocore's default chain found none."""


class SigV4HttpxAuth(httpx.Auth):
    """Signs every request with SigV4: the method, path, query, the ``host``,
    ``content-type`` and ``idempotency-key`` headers and the body. Headers a proxy may rewrite
    (``connection``, ``accept-encoding``, ``user-agent``) are left unsigned.

    :param region: the API's region (us-east-1 in local mode)
    :param credentials: botocore credentials; default botocore's chain (environment,
        profile, instance role), read again for every request so rotated keys are used
    """

    requires_request_body = True

    def __init__(self, region: str, credentials: Credentials | None = None) -> None:
        self.region = region
        self._credentials = credentials
        self._session = Session() if credentials is None else None

    def _current(self) -> Credentials:
        if self._credentials is not None:
            return self._credentials
        assert self._session is not None
        found = self._session.get_credentials()
        if found is None:
            raise MissingCredentials(
                "no AWS credentials: pass them, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
            )
        return found.get_frozen_credentials()  # type: ignore[return-value]

    def auth_flow(
        self, request: httpx.Request
    ) -> Generator[httpx.Request, httpx.Response, None]:
        signed_headers = {"host": request.headers["host"]}
        # The headers that mean something to the API: a changed Idempotency-Key would make
        # a retry a new create.
        for name in ("content-type", "idempotency-key"):
            if name in request.headers:
                signed_headers[name] = request.headers[name]
        aws = AWSRequest(
            method=request.method,
            url=str(request.url),
            data=request.content,
            headers=signed_headers,
        )
        SigV4Auth(self._current(), SERVICE, self.region).add_auth(aws)
        for name in ("Authorization", "X-Amz-Date", "X-Amz-Security-Token"):
            if name in aws.headers:
                request.headers[name] = aws.headers[name]
        yield request
