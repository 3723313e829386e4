import datetime
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.endpoint_attempt_list import EndpointAttemptList
from ...models.outcome_filter import OutcomeFilter
from ...models.problem import Problem
from ...types import UNSET, Response, Unset


def _get_kwargs(
    tenant_id: str,
    endpoint_id: str,
    *,
    since: datetime.datetime | Unset = UNSET,
    until: datetime.datetime | Unset = UNSET,
    outcome: OutcomeFilter | Unset = UNSET,
    limit: int | Unset = UNSET,
    cursor: str | Unset = UNSET,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    json_since: str | Unset = UNSET
    if not isinstance(since, Unset):
        json_since = since.isoformat()
    params["since"] = json_since

    json_until: str | Unset = UNSET
    if not isinstance(until, Unset):
        json_until = until.isoformat()
    params["until"] = json_until

    json_outcome: str | Unset = UNSET
    if not isinstance(outcome, Unset):
        json_outcome = outcome.value

    params["outcome"] = json_outcome

    params["limit"] = limit

    params["cursor"] = cursor

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/tenants/{tenant_id}/endpoints/{endpoint_id}/attempts".format(
            tenant_id=quote(str(tenant_id), safe=""),
            endpoint_id=quote(str(endpoint_id), safe=""),
        ),
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> EndpointAttemptList | Problem | None:
    if response.status_code == 200:
        response_200 = EndpointAttemptList.from_dict(response.json())

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
) -> Response[EndpointAttemptList | Problem]:
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
    since: datetime.datetime | Unset = UNSET,
    until: datetime.datetime | Unset = UNSET,
    outcome: OutcomeFilter | Unset = UNSET,
    limit: int | Unset = UNSET,
    cursor: str | Unset = UNSET,
) -> Response[EndpointAttemptList | Problem]:
    """The endpoint's attempts over a time range, newest first, filtered by outcome.

    Args:
        tenant_id (str):
        endpoint_id (str):
        since (datetime.datetime | Unset):
        until (datetime.datetime | Unset):
        outcome (OutcomeFilter | Unset): How an attempt ended, as a filter.
        limit (int | Unset):
        cursor (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[EndpointAttemptList | Problem]
    """

    kwargs = _get_kwargs(
        tenant_id=tenant_id,
        endpoint_id=endpoint_id,
        since=since,
        until=until,
        outcome=outcome,
        limit=limit,
        cursor=cursor,
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
    since: datetime.datetime | Unset = UNSET,
    until: datetime.datetime | Unset = UNSET,
    outcome: OutcomeFilter | Unset = UNSET,
    limit: int | Unset = UNSET,
    cursor: str | Unset = UNSET,
) -> EndpointAttemptList | Problem | None:
    """The endpoint's attempts over a time range, newest first, filtered by outcome.

    Args:
        tenant_id (str):
        endpoint_id (str):
        since (datetime.datetime | Unset):
        until (datetime.datetime | Unset):
        outcome (OutcomeFilter | Unset): How an attempt ended, as a filter.
        limit (int | Unset):
        cursor (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        EndpointAttemptList | Problem
    """

    return sync_detailed(
        tenant_id=tenant_id,
        endpoint_id=endpoint_id,
        client=client,
        since=since,
        until=until,
        outcome=outcome,
        limit=limit,
        cursor=cursor,
    ).parsed


async def asyncio_detailed(
    tenant_id: str,
    endpoint_id: str,
    *,
    client: AuthenticatedClient,
    since: datetime.datetime | Unset = UNSET,
    until: datetime.datetime | Unset = UNSET,
    outcome: OutcomeFilter | Unset = UNSET,
    limit: int | Unset = UNSET,
    cursor: str | Unset = UNSET,
) -> Response[EndpointAttemptList | Problem]:
    """The endpoint's attempts over a time range, newest first, filtered by outcome.

    Args:
        tenant_id (str):
        endpoint_id (str):
        since (datetime.datetime | Unset):
        until (datetime.datetime | Unset):
        outcome (OutcomeFilter | Unset): How an attempt ended, as a filter.
        limit (int | Unset):
        cursor (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[EndpointAttemptList | Problem]
    """

    kwargs = _get_kwargs(
        tenant_id=tenant_id,
        endpoint_id=endpoint_id,
        since=since,
        until=until,
        outcome=outcome,
        limit=limit,
        cursor=cursor,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    tenant_id: str,
    endpoint_id: str,
    *,
    client: AuthenticatedClient,
    since: datetime.datetime | Unset = UNSET,
    until: datetime.datetime | Unset = UNSET,
    outcome: OutcomeFilter | Unset = UNSET,
    limit: int | Unset = UNSET,
    cursor: str | Unset = UNSET,
) -> EndpointAttemptList | Problem | None:
    """The endpoint's attempts over a time range, newest first, filtered by outcome.

    Args:
        tenant_id (str):
        endpoint_id (str):
        since (datetime.datetime | Unset):
        until (datetime.datetime | Unset):
        outcome (OutcomeFilter | Unset): How an attempt ended, as a filter.
        limit (int | Unset):
        cursor (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        EndpointAttemptList | Problem
    """

    return (
        await asyncio_detailed(
            tenant_id=tenant_id,
            endpoint_id=endpoint_id,
            client=client,
            since=since,
            until=until,
            outcome=outcome,
            limit=limit,
            cursor=cursor,
        )
    ).parsed
