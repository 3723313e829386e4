from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.dead_letter_groups import DeadLetterGroups
from ...models.problem import Problem
from ...types import UNSET, Response, Unset


def _get_kwargs(
    tenant_id: str,
    *,
    max_: int | Unset = UNSET,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    params["max"] = max_

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/tenants/{tenant_id}/dead-letters".format(
            tenant_id=quote(str(tenant_id), safe=""),
        ),
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> DeadLetterGroups | Problem | None:
    if response.status_code == 200:
        response_200 = DeadLetterGroups.from_dict(response.json())

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

    if response.status_code == 413:
        response_413 = Problem.from_dict(response.json())

        return response_413

    if response.status_code == 415:
        response_415 = Problem.from_dict(response.json())

        return response_415

    if response.status_code == 503:
        response_503 = Problem.from_dict(response.json())

        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[DeadLetterGroups | Problem]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    tenant_id: str,
    *,
    client: AuthenticatedClient,
    max_: int | Unset = UNSET,
) -> Response[DeadLetterGroups | Problem]:
    """This tenant's dead letters, grouped by endpoint and reason, largest group first.

     Read from the tenant's dead-letter record, never from the shared DLQ: a list hides nothing
    from another tenant's list or replay. Messages SQS moved to the DLQ itself (after its
    `maxReceiveCount`) are not in the record.

    Args:
        tenant_id (str):
        max_ (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[DeadLetterGroups | Problem]
    """

    kwargs = _get_kwargs(
        tenant_id=tenant_id,
        max_=max_,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    tenant_id: str,
    *,
    client: AuthenticatedClient,
    max_: int | Unset = UNSET,
) -> DeadLetterGroups | Problem | None:
    """This tenant's dead letters, grouped by endpoint and reason, largest group first.

     Read from the tenant's dead-letter record, never from the shared DLQ: a list hides nothing
    from another tenant's list or replay. Messages SQS moved to the DLQ itself (after its
    `maxReceiveCount`) are not in the record.

    Args:
        tenant_id (str):
        max_ (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        DeadLetterGroups | Problem
    """

    return sync_detailed(
        tenant_id=tenant_id,
        client=client,
        max_=max_,
    ).parsed


async def asyncio_detailed(
    tenant_id: str,
    *,
    client: AuthenticatedClient,
    max_: int | Unset = UNSET,
) -> Response[DeadLetterGroups | Problem]:
    """This tenant's dead letters, grouped by endpoint and reason, largest group first.

     Read from the tenant's dead-letter record, never from the shared DLQ: a list hides nothing
    from another tenant's list or replay. Messages SQS moved to the DLQ itself (after its
    `maxReceiveCount`) are not in the record.

    Args:
        tenant_id (str):
        max_ (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[DeadLetterGroups | Problem]
    """

    kwargs = _get_kwargs(
        tenant_id=tenant_id,
        max_=max_,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    tenant_id: str,
    *,
    client: AuthenticatedClient,
    max_: int | Unset = UNSET,
) -> DeadLetterGroups | Problem | None:
    """This tenant's dead letters, grouped by endpoint and reason, largest group first.

     Read from the tenant's dead-letter record, never from the shared DLQ: a list hides nothing
    from another tenant's list or replay. Messages SQS moved to the DLQ itself (after its
    `maxReceiveCount`) are not in the record.

    Args:
        tenant_id (str):
        max_ (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        DeadLetterGroups | Problem
    """

    return (
        await asyncio_detailed(
            tenant_id=tenant_id,
            client=client,
            max_=max_,
        )
    ).parsed
