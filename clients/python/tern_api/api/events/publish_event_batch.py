from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.new_event_batch import NewEventBatch
from ...models.problem import Problem
from ...models.published_event_batch import PublishedEventBatch
from ...types import UNSET, Response, Unset


def _get_kwargs(
    tenant_id: str,
    *,
    body: NewEventBatch,
    idempotency_key: str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(idempotency_key, Unset):
        headers["Idempotency-Key"] = idempotency_key

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/tenants/{tenant_id}/event-batches".format(
            tenant_id=quote(str(tenant_id), safe=""),
        ),
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Problem | PublishedEventBatch | None:
    if response.status_code == 200:
        response_200 = PublishedEventBatch.from_dict(response.json())

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
) -> Response[Problem | PublishedEventBatch]:
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
    body: NewEventBatch,
    idempotency_key: str | Unset = UNSET,
) -> Response[Problem | PublishedEventBatch]:
    """Publish up to 100 events in one request, each as `publishEvent` publishes one (the same
    checks and limits, idempotent on its `id`), each on its own: one event's problem does
    not stop the others. The answer is 200 with a result per event, in order, whose `status`
    is what `publishEvent` would have answered for it (202, 200, or its problem's); `failed`
    counts the events not published. A body that is not a batch (no `events`, 0 or more
    than 100, an event without `type` or `payload`, a bad `traceparent` or `tracestate`)
    is refused whole, nothing written.

    Args:
        tenant_id (str):
        idempotency_key (str | Unset):
        body (NewEventBatch): Events to publish in one request: each as `publishEvent` takes one.
            Example: {'events': [{'id': 'evt_3f9c2b7e-order-o_1-paid', 'payload': {'amount': 4200,
            'order_id': 'o_1'}, 'type': 'order.paid'}, {'payload': {'order_id': 'o_2'}, 'type':
            'order.shipped'}]}.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | PublishedEventBatch]
    """

    kwargs = _get_kwargs(
        tenant_id=tenant_id,
        body=body,
        idempotency_key=idempotency_key,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    tenant_id: str,
    *,
    client: AuthenticatedClient,
    body: NewEventBatch,
    idempotency_key: str | Unset = UNSET,
) -> Problem | PublishedEventBatch | None:
    """Publish up to 100 events in one request, each as `publishEvent` publishes one (the same
    checks and limits, idempotent on its `id`), each on its own: one event's problem does
    not stop the others. The answer is 200 with a result per event, in order, whose `status`
    is what `publishEvent` would have answered for it (202, 200, or its problem's); `failed`
    counts the events not published. A body that is not a batch (no `events`, 0 or more
    than 100, an event without `type` or `payload`, a bad `traceparent` or `tracestate`)
    is refused whole, nothing written.

    Args:
        tenant_id (str):
        idempotency_key (str | Unset):
        body (NewEventBatch): Events to publish in one request: each as `publishEvent` takes one.
            Example: {'events': [{'id': 'evt_3f9c2b7e-order-o_1-paid', 'payload': {'amount': 4200,
            'order_id': 'o_1'}, 'type': 'order.paid'}, {'payload': {'order_id': 'o_2'}, 'type':
            'order.shipped'}]}.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | PublishedEventBatch
    """

    return sync_detailed(
        tenant_id=tenant_id,
        client=client,
        body=body,
        idempotency_key=idempotency_key,
    ).parsed


async def asyncio_detailed(
    tenant_id: str,
    *,
    client: AuthenticatedClient,
    body: NewEventBatch,
    idempotency_key: str | Unset = UNSET,
) -> Response[Problem | PublishedEventBatch]:
    """Publish up to 100 events in one request, each as `publishEvent` publishes one (the same
    checks and limits, idempotent on its `id`), each on its own: one event's problem does
    not stop the others. The answer is 200 with a result per event, in order, whose `status`
    is what `publishEvent` would have answered for it (202, 200, or its problem's); `failed`
    counts the events not published. A body that is not a batch (no `events`, 0 or more
    than 100, an event without `type` or `payload`, a bad `traceparent` or `tracestate`)
    is refused whole, nothing written.

    Args:
        tenant_id (str):
        idempotency_key (str | Unset):
        body (NewEventBatch): Events to publish in one request: each as `publishEvent` takes one.
            Example: {'events': [{'id': 'evt_3f9c2b7e-order-o_1-paid', 'payload': {'amount': 4200,
            'order_id': 'o_1'}, 'type': 'order.paid'}, {'payload': {'order_id': 'o_2'}, 'type':
            'order.shipped'}]}.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | PublishedEventBatch]
    """

    kwargs = _get_kwargs(
        tenant_id=tenant_id,
        body=body,
        idempotency_key=idempotency_key,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    tenant_id: str,
    *,
    client: AuthenticatedClient,
    body: NewEventBatch,
    idempotency_key: str | Unset = UNSET,
) -> Problem | PublishedEventBatch | None:
    """Publish up to 100 events in one request, each as `publishEvent` publishes one (the same
    checks and limits, idempotent on its `id`), each on its own: one event's problem does
    not stop the others. The answer is 200 with a result per event, in order, whose `status`
    is what `publishEvent` would have answered for it (202, 200, or its problem's); `failed`
    counts the events not published. A body that is not a batch (no `events`, 0 or more
    than 100, an event without `type` or `payload`, a bad `traceparent` or `tracestate`)
    is refused whole, nothing written.

    Args:
        tenant_id (str):
        idempotency_key (str | Unset):
        body (NewEventBatch): Events to publish in one request: each as `publishEvent` takes one.
            Example: {'events': [{'id': 'evt_3f9c2b7e-order-o_1-paid', 'payload': {'amount': 4200,
            'order_id': 'o_1'}, 'type': 'order.paid'}, {'payload': {'order_id': 'o_2'}, 'type':
            'order.shipped'}]}.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | PublishedEventBatch
    """

    return (
        await asyncio_detailed(
            tenant_id=tenant_id,
            client=client,
            body=body,
            idempotency_key=idempotency_key,
        )
    ).parsed
