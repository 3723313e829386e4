from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.problem import Problem
from ...models.resend import Resend
from ...types import UNSET, Response, Unset


def _get_kwargs(
    tenant_id: str,
    event_id: str,
    endpoint_id: str,
    *,
    idempotency_key: str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(idempotency_key, Unset):
        headers["Idempotency-Key"] = idempotency_key

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/tenants/{tenant_id}/events/{event_id}/endpoints/{endpoint_id}/resend".format(
            tenant_id=quote(str(tenant_id), safe=""),
            event_id=quote(str(event_id), safe=""),
            endpoint_id=quote(str(endpoint_id), safe=""),
        ),
    }

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Problem | Resend | None:
    if response.status_code == 202:
        response_202 = Resend.from_dict(response.json())

        return response_202

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
) -> Response[Problem | Resend]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    tenant_id: str,
    event_id: str,
    endpoint_id: str,
    *,
    client: AuthenticatedClient,
    idempotency_key: str | Unset = UNSET,
) -> Response[Problem | Resend]:
    """Send the event to the endpoint again, delivered before or not: the same `webhook-id`,
    a fresh attempt budget, recorded as a replay.

    Args:
        tenant_id (str):
        event_id (str):
        endpoint_id (str):
        idempotency_key (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | Resend]
    """

    kwargs = _get_kwargs(
        tenant_id=tenant_id,
        event_id=event_id,
        endpoint_id=endpoint_id,
        idempotency_key=idempotency_key,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    tenant_id: str,
    event_id: str,
    endpoint_id: str,
    *,
    client: AuthenticatedClient,
    idempotency_key: str | Unset = UNSET,
) -> Problem | Resend | None:
    """Send the event to the endpoint again, delivered before or not: the same `webhook-id`,
    a fresh attempt budget, recorded as a replay.

    Args:
        tenant_id (str):
        event_id (str):
        endpoint_id (str):
        idempotency_key (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | Resend
    """

    return sync_detailed(
        tenant_id=tenant_id,
        event_id=event_id,
        endpoint_id=endpoint_id,
        client=client,
        idempotency_key=idempotency_key,
    ).parsed


async def asyncio_detailed(
    tenant_id: str,
    event_id: str,
    endpoint_id: str,
    *,
    client: AuthenticatedClient,
    idempotency_key: str | Unset = UNSET,
) -> Response[Problem | Resend]:
    """Send the event to the endpoint again, delivered before or not: the same `webhook-id`,
    a fresh attempt budget, recorded as a replay.

    Args:
        tenant_id (str):
        event_id (str):
        endpoint_id (str):
        idempotency_key (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | Resend]
    """

    kwargs = _get_kwargs(
        tenant_id=tenant_id,
        event_id=event_id,
        endpoint_id=endpoint_id,
        idempotency_key=idempotency_key,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    tenant_id: str,
    event_id: str,
    endpoint_id: str,
    *,
    client: AuthenticatedClient,
    idempotency_key: str | Unset = UNSET,
) -> Problem | Resend | None:
    """Send the event to the endpoint again, delivered before or not: the same `webhook-id`,
    a fresh attempt budget, recorded as a replay.

    Args:
        tenant_id (str):
        event_id (str):
        endpoint_id (str):
        idempotency_key (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | Resend
    """

    return (
        await asyncio_detailed(
            tenant_id=tenant_id,
            event_id=event_id,
            endpoint_id=endpoint_id,
            client=client,
            idempotency_key=idempotency_key,
        )
    ).parsed
