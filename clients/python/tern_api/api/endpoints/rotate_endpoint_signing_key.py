from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.problem import Problem
from ...models.rotate_signing_key_request import RotateSigningKeyRequest
from ...models.rotated_signing_key import RotatedSigningKey
from ...types import UNSET, Response, Unset


def _get_kwargs(
    tenant_id: str,
    endpoint_id: str,
    *,
    body: RotateSigningKeyRequest,
    idempotency_key: str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(idempotency_key, Unset):
        headers["Idempotency-Key"] = idempotency_key

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/tenants/{tenant_id}/endpoints/{endpoint_id}/rotate-signing-key".format(
            tenant_id=quote(str(tenant_id), safe=""),
            endpoint_id=quote(str(endpoint_id), safe=""),
        ),
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Problem | RotatedSigningKey | None:
    if response.status_code == 200:
        response_200 = RotatedSigningKey.from_dict(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = Problem.from_dict(response.json())

        return response_400

    if response.status_code == 401:
        response_401 = Problem.from_dict(response.json())

        return response_401

    if response.status_code == 403:
        response_403 = Problem.from_dict(response.json())

        return response_403

    if response.status_code == 404:
        response_404 = Problem.from_dict(response.json())

        return response_404

    if response.status_code == 409:
        response_409 = Problem.from_dict(response.json())

        return response_409

    if response.status_code == 413:
        response_413 = Problem.from_dict(response.json())

        return response_413

    if response.status_code == 415:
        response_415 = Problem.from_dict(response.json())

        return response_415

    if response.status_code == 422:
        response_422 = Problem.from_dict(response.json())

        return response_422

    if response.status_code == 503:
        response_503 = Problem.from_dict(response.json())

        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[Problem | RotatedSigningKey]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    tenant_id: str,
    endpoint_id: str,
    *,
    client: AuthenticatedClient,
    body: RotateSigningKeyRequest,
    idempotency_key: str | Unset = UNSET,
) -> Response[Problem | RotatedSigningKey]:
    """Rotate the Ed25519 signing key (`v1a`): the new key signs at once, the old one keeps
    signing for the overlap, so a receiver holding either public key verifies meanwhile.
    Adds the endpoint's first key when it has none. The new public key is in the answer
    (it is no secret: the endpoint's answers show every key's).

    Args:
        tenant_id (str):
        endpoint_id (str):
        idempotency_key (str | Unset):
        body (RotateSigningKeyRequest): Rotating an endpoint's Ed25519 signing key.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | RotatedSigningKey]
    """

    kwargs = _get_kwargs(
        tenant_id=tenant_id,
        endpoint_id=endpoint_id,
        body=body,
        idempotency_key=idempotency_key,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    tenant_id: str,
    endpoint_id: str,
    *,
    client: AuthenticatedClient,
    body: RotateSigningKeyRequest,
    idempotency_key: str | Unset = UNSET,
) -> Problem | RotatedSigningKey | None:
    """Rotate the Ed25519 signing key (`v1a`): the new key signs at once, the old one keeps
    signing for the overlap, so a receiver holding either public key verifies meanwhile.
    Adds the endpoint's first key when it has none. The new public key is in the answer
    (it is no secret: the endpoint's answers show every key's).

    Args:
        tenant_id (str):
        endpoint_id (str):
        idempotency_key (str | Unset):
        body (RotateSigningKeyRequest): Rotating an endpoint's Ed25519 signing key.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | RotatedSigningKey
    """

    return sync_detailed(
        tenant_id=tenant_id,
        endpoint_id=endpoint_id,
        client=client,
        body=body,
        idempotency_key=idempotency_key,
    ).parsed


async def asyncio_detailed(
    tenant_id: str,
    endpoint_id: str,
    *,
    client: AuthenticatedClient,
    body: RotateSigningKeyRequest,
    idempotency_key: str | Unset = UNSET,
) -> Response[Problem | RotatedSigningKey]:
    """Rotate the Ed25519 signing key (`v1a`): the new key signs at once, the old one keeps
    signing for the overlap, so a receiver holding either public key verifies meanwhile.
    Adds the endpoint's first key when it has none. The new public key is in the answer
    (it is no secret: the endpoint's answers show every key's).

    Args:
        tenant_id (str):
        endpoint_id (str):
        idempotency_key (str | Unset):
        body (RotateSigningKeyRequest): Rotating an endpoint's Ed25519 signing key.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | RotatedSigningKey]
    """

    kwargs = _get_kwargs(
        tenant_id=tenant_id,
        endpoint_id=endpoint_id,
        body=body,
        idempotency_key=idempotency_key,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    tenant_id: str,
    endpoint_id: str,
    *,
    client: AuthenticatedClient,
    body: RotateSigningKeyRequest,
    idempotency_key: str | Unset = UNSET,
) -> Problem | RotatedSigningKey | None:
    """Rotate the Ed25519 signing key (`v1a`): the new key signs at once, the old one keeps
    signing for the overlap, so a receiver holding either public key verifies meanwhile.
    Adds the endpoint's first key when it has none. The new public key is in the answer
    (it is no secret: the endpoint's answers show every key's).

    Args:
        tenant_id (str):
        endpoint_id (str):
        idempotency_key (str | Unset):
        body (RotateSigningKeyRequest): Rotating an endpoint's Ed25519 signing key.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | RotatedSigningKey
    """

    return (
        await asyncio_detailed(
            tenant_id=tenant_id,
            endpoint_id=endpoint_id,
            client=client,
            body=body,
            idempotency_key=idempotency_key,
        )
    ).parsed
