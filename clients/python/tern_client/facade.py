"""The resource-style facade over the generated client: one method per operation of
shared/tern-api/openapi.json, ``tern.endpoints.create("tnt_acme", url=...)``.

Every method takes the tenant id first, then the path ids, then the body's fields or the
query parameters as keyword arguments (named as in the document; a field left out is not
sent, ``None`` sends ``null``). It returns the generated attrs model of the answer
(``tern_api.models``; ``.to_dict()`` gives its JSON) and raises :class:`TernApiError` on
an error answer. It only maps arguments onto the generated ``sync_detailed`` calls; the
generated client stays available as ``Tern.raw`` for anything else (headers, ``asyncio``).

Every method that POSTs takes ``idempotency_key=`` (a UUID made once per logical request and
kept for its retries), sent as the ``Idempotency-Key`` header: for 24 hours a retry with the
same key and the same arguments returns the first answer again and does nothing twice; the
key with other arguments raises ``TernApiError`` 422 ``idempotency-key-reused``, and one sent
while the first still runs 409 ``idempotency-key-in-use`` (retry it). docs/api.md
"Idempotency".
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self

from botocore.credentials import Credentials
from tern_api import AuthenticatedClient
from tern_api.api.dead_letters import list_dead_letters, replay_dead_letters
from tern_api.api.endpoints import (
    create_endpoint,
    delete_endpoint,
    disable_endpoint,
    enable_endpoint,
    get_endpoint,
    get_endpoint_health,
    list_endpoint_attempts,
    list_endpoints,
    recover_endpoint,
    rotate_endpoint_secret,
    rotate_endpoint_signing_key,
    send_test_event,
    update_endpoint,
)
from tern_api.api.events import (
    get_event,
    list_event_attempts,
    publish_event,
    publish_event_batch,
    resend_event,
)
from tern_api.api.portal import create_portal_session
from tern_api.models import (
    AuthBasic,
    AuthBearer,
    AuthNone,
    AuthOauth2ClientCredentials,
    CustomHeaderSetting,
    DeadLetterGroups,
    DisableRequest,
    Endpoint,
    EndpointAttemptList,
    EndpointCreated,
    EndpointHealth,
    EndpointList,
    EndpointPatch,
    EndpointStateFilter,
    Event,
    EventAttempts,
    NewEndpoint,
    NewEvent,
    NewEventBatch,
    NewEventPayload,
    OutcomeFilter,
    PayloadFormat,
    PortalSession,
    PortalSessionRequest,
    PublishedEvent,
    PublishedEventBatch,
    RecoverReport,
    RecoverRequest,
    ReplayReport,
    ReplayRequest,
    Resend,
    RotatedSecret,
    RotatedSigningKey,
    RotateSecretRequest,
    RotateSigningKeyRequest,
    Signatures,
    TestSend,
)
from tern_api.types import UNSET, Unset

from . import trace_context
from .client import create_client, unwrap

__all__ = ["DeadLetters", "Endpoints", "Events", "Portal", "ReceiverAuth", "Tern"]

# Aliases: inside a class with a ``list`` method, ``list[str]`` would name the method.
_Strs = list[str]
_Ints = list[int]

#: An endpoint's authentication to its receiver, one model per ``type`` (the document's
#: ``ReceiverAuthSetting``): ``AuthNone``, ``AuthBasic``, ``AuthBearer``,
#: ``AuthOauth2ClientCredentials``. The facade also takes the JSON form, a dict such as
#: ``{"type": "bearer", "token": "..."}``.
ReceiverAuth = AuthNone | AuthBasic | AuthBearer | AuthOauth2ClientCredentials
_AUTH_MODELS: dict[str, type[Any]] = {
    "none": AuthNone,
    "basic": AuthBasic,
    "bearer": AuthBearer,
    "oauth2_client_credentials": AuthOauth2ClientCredentials,
}
#: The custom headers argument: ``CustomHeaderSetting`` models or their JSON form,
#: ``{"name": "X-Api-Key", "value": "...", "secret": True}``.
_Headers = list[CustomHeaderSetting | Mapping[str, Any]]


def _id(name: str, value: str) -> str:
    """A path id, checked: an empty id, ``.`` or ``..`` would change the path the request
    goes to (URLs drop dot segments), so it raises ``ValueError`` before anything is sent."""
    if value in ("", ".", ".."):
        raise ValueError(f"{name} must be an id, not {value!r}")
    return value


def _enum(kind: type[Any], value: Any) -> Any:
    """An enum from its member or its value (``"failed"``), so a wrong one raises
    ``ValueError`` here; ``UNSET`` and ``None`` stay."""
    return value if value is None or isinstance(value, Unset) else kind(value)


def _auth(value: Any) -> Any:
    """An authentication model from a model or its dict (by ``type``); ``UNSET`` and
    ``None`` stay. An unknown ``type`` raises ``ValueError`` before anything is sent."""
    if value is None or isinstance(value, (Unset, *_AUTH_MODELS.values())):
        return value
    if isinstance(value, Mapping):
        model = _AUTH_MODELS.get(str(value.get("type")))
        if model is None:
            raise ValueError(
                f"auth type must be one of {', '.join(_AUTH_MODELS)}, not {value.get('type')!r}"
            )
        return model.from_dict(value)
    raise TypeError(f"auth must be an Auth* model or a dict, not {type(value).__name__}")


def _headers(value: Any) -> Any:
    """``CustomHeaderSetting`` models from models or dicts; ``UNSET`` and ``None`` stay."""
    if value is None or isinstance(value, Unset):
        return value
    return [
        h if isinstance(h, CustomHeaderSetting) else CustomHeaderSetting.from_dict(h)
        for h in value
    ]


class Endpoints:
    """The endpoints of a tenant: ``tern.endpoints``."""

    def __init__(self, client: AuthenticatedClient) -> None:
        self._client = client

    def list(
        self,
        tenant_id: str,
        *,
        state: EndpointStateFilter | str | Unset = UNSET,
        limit: int | Unset = UNSET,
        cursor: str | Unset = UNSET,
    ) -> EndpointList:
        """``listEndpoints``: a page of endpoints in id order; pass ``next_cursor`` as
        ``cursor`` for the next. ``state``: ``"enabled"`` or ``"disabled"``."""
        return unwrap(
            list_endpoints.sync_detailed(
                _id("tenant_id", tenant_id),
                client=self._client,
                state=_enum(EndpointStateFilter, state),
                limit=limit,
                cursor=cursor,
            )
        )

    def create(
        self,
        tenant_id: str,
        *,
        url: str,
        event_types: _Strs | None | Unset = UNSET,
        description: str | None | Unset = UNSET,
        payload_format: PayloadFormat | str | None | Unset = UNSET,
        max_attempts: int | None | Unset = UNSET,
        max_per_second: int | None | Unset = UNSET,
        send_traceparent: bool | None | Unset = UNSET,
        schedule_seconds: _Ints | None | Unset = UNSET,
        timeout_ms: int | None | Unset = UNSET,
        client_certificate_arn: str | None | Unset = UNSET,
        headers: _Headers | None | Unset = UNSET,
        auth: ReceiverAuth | Mapping[str, Any] | None | Unset = UNSET,
        signatures: Signatures | str | None | Unset = UNSET,
        idempotency_key: str | Unset = UNSET,
    ) -> EndpointCreated:
        """``createEndpoint``: the endpoint and its signing secret (``.secret``), shown
        this once. The fields are ``NewEndpoint``'s. ``idempotency_key`` (a UUID you keep
        for the retries of this one create) makes a retry answer the first create's
        endpoint and secret instead of creating a second one; the key with other fields
        raises ``TernApiError`` 422 ``idempotency-key-reused``.

        Receiver settings: ``headers``, custom headers sent with every attempt (at most
        20; ``{"name": "X-Api-Key", "value": "...", "secret": True}`` is never shown
        again); ``auth``, how requests authenticate to the receiver
        (``{"type": "bearer", "token": "..."}``, ``"basic"`` with ``username`` and
        ``password``, ``"oauth2_client_credentials"`` with ``token_url``, ``client_id``,
        ``client_secret``, ``scope``, ``audience``, ``client_auth``; or the ``Auth*``
        models); ``signatures``, ``"v1"`` (default), ``"v1a"`` or ``"both"`` (Ed25519: the
        public key is in ``.endpoint.signing_keys``); ``send_traceparent``, True to send
        each attempt's W3C ``traceparent`` header (docs/tracing.md). Secrets are write-only: answers
        show a secret header's value as ``None`` and name the auth's secret in
        ``.endpoint.auth.secret``."""
        body = NewEndpoint(
            url=url,
            event_types=event_types,
            description=description,
            payload_format=_enum(PayloadFormat, payload_format),
            max_attempts=max_attempts,
            max_per_second=max_per_second,
            send_traceparent=send_traceparent,
            schedule_seconds=schedule_seconds,
            timeout_ms=timeout_ms,
            client_certificate_arn=client_certificate_arn,
            headers=_headers(headers),
            auth=_auth(auth),
            signatures=_enum(Signatures, signatures),
        )
        return unwrap(
            create_endpoint.sync_detailed(
                _id("tenant_id", tenant_id),
                client=self._client,
                body=body,
                idempotency_key=idempotency_key,
            )
        )

    def get(self, tenant_id: str, endpoint_id: str) -> Endpoint:
        """``getEndpoint``."""
        return unwrap(
            get_endpoint.sync_detailed(
                _id("tenant_id", tenant_id),
                _id("endpoint_id", endpoint_id),
                client=self._client,
            )
        )

    def update(
        self,
        tenant_id: str,
        endpoint_id: str,
        *,
        url: str | None | Unset = UNSET,
        event_types: _Strs | None | Unset = UNSET,
        description: str | None | Unset = UNSET,
        payload_format: PayloadFormat | str | None | Unset = UNSET,
        max_attempts: int | None | Unset = UNSET,
        max_per_second: int | None | Unset = UNSET,
        send_traceparent: bool | None | Unset = UNSET,
        schedule_seconds: _Ints | None | Unset = UNSET,
        timeout_ms: int | None | Unset = UNSET,
        client_certificate_arn: str | None | Unset = UNSET,
        headers: _Headers | None | Unset = UNSET,
        auth: ReceiverAuth | Mapping[str, Any] | None | Unset = UNSET,
        signatures: Signatures | str | None | Unset = UNSET,
    ) -> Endpoint:
        """``updateEndpoint``: only the fields given change; ``None`` returns a setting
        to its default. The fields are ``EndpointPatch``'s.

        ``headers`` replaces the whole list; a secret entry without ``value``
        (``{"name": "X-Api-Key", "secret": True}``) keeps the stored value of that name.
        ``auth`` replaces the setting; left out of it, a secret is kept when the stored
        authentication has the same type (basic: the same ``username``; OAuth2: the same
        ``token_url`` and ``client_id``). Turning ``signatures`` to ``"v1a"`` or
        ``"both"`` makes an Ed25519 key when the endpoint has none."""
        body = EndpointPatch(
            url=url,
            event_types=event_types,
            description=description,
            payload_format=_enum(PayloadFormat, payload_format),
            max_attempts=max_attempts,
            max_per_second=max_per_second,
            send_traceparent=send_traceparent,
            schedule_seconds=schedule_seconds,
            timeout_ms=timeout_ms,
            client_certificate_arn=client_certificate_arn,
            headers=_headers(headers),
            auth=_auth(auth),
            signatures=_enum(Signatures, signatures),
        )
        return unwrap(
            update_endpoint.sync_detailed(
                _id("tenant_id", tenant_id),
                _id("endpoint_id", endpoint_id),
                client=self._client,
                body=body,
            )
        )

    def delete(self, tenant_id: str, endpoint_id: str) -> None:
        """``deleteEndpoint`` (204: returns ``None``)."""
        unwrap(
            delete_endpoint.sync_detailed(
                _id("tenant_id", tenant_id),
                _id("endpoint_id", endpoint_id),
                client=self._client,
            )
        )

    def enable(
        self,
        tenant_id: str,
        endpoint_id: str,
        *,
        idempotency_key: str | Unset = UNSET,
    ) -> Endpoint:
        """``enableEndpoint``: its health is reset (circuit closed). ``idempotency_key``:
        as every POST method's (see the module)."""
        return unwrap(
            enable_endpoint.sync_detailed(
                _id("tenant_id", tenant_id),
                _id("endpoint_id", endpoint_id),
                client=self._client,
                idempotency_key=idempotency_key,
            )
        )

    def disable(
        self,
        tenant_id: str,
        endpoint_id: str,
        *,
        reason: str | None | Unset = UNSET,
        idempotency_key: str | Unset = UNSET,
    ) -> Endpoint:
        """``disableEndpoint``, with an optional ``reason`` kept on the endpoint."""
        return unwrap(
            disable_endpoint.sync_detailed(
                _id("tenant_id", tenant_id),
                _id("endpoint_id", endpoint_id),
                client=self._client,
                body=DisableRequest(reason=reason),
                idempotency_key=idempotency_key,
            )
        )

    def rotate_secret(
        self,
        tenant_id: str,
        endpoint_id: str,
        *,
        overlap_hours: int | None | Unset = UNSET,
        idempotency_key: str | Unset = UNSET,
    ) -> RotatedSecret:
        """``rotateEndpointSecret``: the new secret (``.secret``), shown this once; the
        old one keeps signing ``overlap_hours`` (default 24). With ``idempotency_key`` a
        retry answers the same new secret instead of rotating again."""
        return unwrap(
            rotate_endpoint_secret.sync_detailed(
                _id("tenant_id", tenant_id),
                _id("endpoint_id", endpoint_id),
                client=self._client,
                body=RotateSecretRequest(overlap_hours=overlap_hours),
                idempotency_key=idempotency_key,
            )
        )

    def rotate_signing_key(
        self,
        tenant_id: str,
        endpoint_id: str,
        *,
        overlap_hours: int | None | Unset = UNSET,
        idempotency_key: str | Unset = UNSET,
    ) -> RotatedSigningKey:
        """``rotateEndpointSigningKey``: a new Ed25519 key signs ``v1a`` at once, the old
        one keeps signing ``overlap_hours`` (default 24). ``.public_key`` (``whpk_...``)
        is no secret: give it to the receiver. With ``idempotency_key`` a retry answers
        the same new key instead of rotating again."""
        return unwrap(
            rotate_endpoint_signing_key.sync_detailed(
                _id("tenant_id", tenant_id),
                _id("endpoint_id", endpoint_id),
                client=self._client,
                body=RotateSigningKeyRequest(overlap_hours=overlap_hours),
                idempotency_key=idempotency_key,
            )
        )

    def test(
        self,
        tenant_id: str,
        endpoint_id: str,
        *,
        idempotency_key: str | Unset = UNSET,
    ) -> TestSend:
        """``sendTestEvent``: a ``tern.test`` event sent now, and what the receiver did."""
        return unwrap(
            send_test_event.sync_detailed(
                _id("tenant_id", tenant_id),
                _id("endpoint_id", endpoint_id),
                client=self._client,
                idempotency_key=idempotency_key,
            )
        )

    def health(self, tenant_id: str, endpoint_id: str) -> EndpointHealth:
        """``getEndpointHealth``."""
        return unwrap(
            get_endpoint_health.sync_detailed(
                _id("tenant_id", tenant_id),
                _id("endpoint_id", endpoint_id),
                client=self._client,
            )
        )

    def attempts(
        self,
        tenant_id: str,
        endpoint_id: str,
        *,
        since: datetime.datetime | Unset = UNSET,
        until: datetime.datetime | Unset = UNSET,
        outcome: OutcomeFilter | str | Unset = UNSET,
        limit: int | Unset = UNSET,
        cursor: str | Unset = UNSET,
    ) -> EndpointAttemptList:
        """``listEndpointAttempts``: the endpoint's delivery log, newest first.
        ``since``/``until``: aware datetimes; ``outcome``: ``"delivered"``, ``"failed"``,
        ``"retry"`` or ``"dead_letter"``."""
        return unwrap(
            list_endpoint_attempts.sync_detailed(
                _id("tenant_id", tenant_id),
                _id("endpoint_id", endpoint_id),
                client=self._client,
                since=since,
                until=until,
                outcome=_enum(OutcomeFilter, outcome),
                limit=limit,
                cursor=cursor,
            )
        )

    def recover(
        self,
        tenant_id: str,
        endpoint_id: str,
        *,
        since: datetime.datetime,
        until: datetime.datetime | None | Unset = UNSET,
        enable: bool | Unset = UNSET,
        idempotency_key: str | Unset = UNSET,
    ) -> RecoverReport:
        """``recoverEndpoint``: every delivery that failed in ``since``..``until``
        (default now) is sent again; ``enable=True`` enables a disabled endpoint first."""
        return unwrap(
            recover_endpoint.sync_detailed(
                _id("tenant_id", tenant_id),
                _id("endpoint_id", endpoint_id),
                client=self._client,
                body=RecoverRequest(since=since, until=until, enable=enable),
                idempotency_key=idempotency_key,
            )
        )


class Events:
    """The events of a tenant: ``tern.events``."""

    def __init__(self, client: AuthenticatedClient) -> None:
        self._client = client

    def publish(
        self,
        tenant_id: str,
        *,
        type: str,
        payload: Mapping[str, Any],
        id: str | None = None,
        idempotency_key: str | Unset = UNSET,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> PublishedEvent:
        """``publishEvent``: ``payload`` a dict (any JSON object), sent as JSON. Idempotent on ``id``
        (default: a new ``evt_`` id): a repeat returns the original, ``created`` False.
        ``traceparent``/``tracestate``: the W3C trace context Tern's spans of the event join;
        default: the current OpenTelemetry span's, when ``opentelemetry`` is installed."""
        if traceparent is None:
            found = trace_context.current()
            if found is not None:
                traceparent, tracestate = found
        body = NewEvent(
            type_=type,
            payload=NewEventPayload.from_dict(payload),
            id=UNSET if id is None else id,
            traceparent=UNSET if traceparent is None else traceparent,
            tracestate=UNSET if tracestate is None else tracestate,
        )
        return unwrap(
            publish_event.sync_detailed(
                _id("tenant_id", tenant_id),
                client=self._client,
                body=body,
                idempotency_key=idempotency_key,
            )
        )

    def publish_batch(
        self,
        tenant_id: str,
        *,
        events: list[NewEvent | Mapping[str, Any]],
        idempotency_key: str | Unset = UNSET,
    ) -> PublishedEventBatch:
        """``publishEventBatch``: 1-100 events in one request, each a ``NewEvent`` or its JSON
        form (``{"type": ..., "payload": {...}, "id": ...}``, ``id`` optional; the body at most
        2,621,440 bytes), each published on its own. Returns one result per event, in order:
        ``status`` 202 (published), 200 (published before with that id) or its problem's (400,
        409, 413; 503: send it again); ``failed`` counts the events not published. Each result
        names the event's ``id``, made for it when none was given: send a failed event again
        with it. With ``idempotency_key`` a retried call returns the first call's results."""
        body = NewEventBatch(
            events=[e if isinstance(e, NewEvent) else NewEvent.from_dict(dict(e)) for e in events]
        )
        return unwrap(
            publish_event_batch.sync_detailed(
                _id("tenant_id", tenant_id),
                client=self._client,
                body=body,
                idempotency_key=idempotency_key,
            )
        )

    def get(self, tenant_id: str, event_id: str) -> Event:
        """``getEvent``: the event and where each of its deliveries stands (its type is
        ``.type_``)."""
        return unwrap(
            get_event.sync_detailed(
                _id("tenant_id", tenant_id),
                _id("event_id", event_id),
                client=self._client,
            )
        )

    def attempts(self, tenant_id: str, event_id: str) -> EventAttempts:
        """``listEventAttempts``: every try of the event, oldest first, and its
        dead-lettered budgets."""
        return unwrap(
            list_event_attempts.sync_detailed(
                _id("tenant_id", tenant_id),
                _id("event_id", event_id),
                client=self._client,
            )
        )

    def resend(
        self,
        tenant_id: str,
        event_id: str,
        endpoint_id: str,
        *,
        idempotency_key: str | Unset = UNSET,
    ) -> Resend:
        """``resendEvent``: the event goes to the endpoint again."""
        return unwrap(
            resend_event.sync_detailed(
                _id("tenant_id", tenant_id),
                _id("event_id", event_id),
                _id("endpoint_id", endpoint_id),
                client=self._client,
                idempotency_key=idempotency_key,
            )
        )


class DeadLetters:
    """The dead letters of a tenant: ``tern.dead_letters``."""

    def __init__(self, client: AuthenticatedClient) -> None:
        self._client = client

    def list(
        self,
        tenant_id: str,
        *,
        max: int | Unset = UNSET,
    ) -> DeadLetterGroups:
        """``listDeadLetters``: grouped by endpoint and reason, largest group first;
        ``max`` 1..=500 (default 100)."""
        return unwrap(
            list_dead_letters.sync_detailed(
                _id("tenant_id", tenant_id), client=self._client, max_=max
            )
        )

    def replay(
        self,
        tenant_id: str,
        *,
        endpoint_id: str | None | Unset = UNSET,
        event_id: str | None | Unset = UNSET,
        event_type: str | None | Unset = UNSET,
        reason: str | None | Unset = UNSET,
        dead_lettered_since: datetime.datetime | None | Unset = UNSET,
        dead_lettered_until: datetime.datetime | None | Unset = UNSET,
        dry_run: bool | Unset = UNSET,
        force: bool | Unset = UNSET,
        idempotency_key: str | Unset = UNSET,
    ) -> ReplayReport:
        """``replayDeadLetters``: every filter given must match (none: all of them)."""
        body = ReplayRequest(
            endpoint_id=endpoint_id,
            event_id=event_id,
            event_type=event_type,
            reason=reason,
            dead_lettered_since=dead_lettered_since,
            dead_lettered_until=dead_lettered_until,
            dry_run=dry_run,
            force=force,
        )
        return unwrap(
            replay_dead_letters.sync_detailed(
                _id("tenant_id", tenant_id),
                client=self._client,
                body=body,
                idempotency_key=idempotency_key,
            )
        )


class Portal:
    """The customer portal: ``tern.portal``."""

    def __init__(self, client: AuthenticatedClient) -> None:
        self._client = client

    def create_session(
        self,
        tenant_id: str,
        *,
        endpoint_ids: _Strs | None | Unset = UNSET,
        event_types: _Strs | None | Unset = UNSET,
        read_only: bool | Unset = UNSET,
        expires_in_seconds: int | None | Unset = UNSET,
        brand_color: str | None | Unset = UNSET,
        logo_url: str | None | Unset = UNSET,
        idempotency_key: str | Unset = UNSET,
    ) -> PortalSession:
        """``createPortalSession``: a single-use link (``.url``); by default to every
        endpoint of the tenant, for an hour."""
        body = PortalSessionRequest(
            endpoint_ids=endpoint_ids,
            event_types=event_types,
            read_only=read_only,
            expires_in_seconds=expires_in_seconds,
            brand_color=brand_color,
            logo_url=logo_url,
        )
        return unwrap(
            create_portal_session.sync_detailed(
                _id("tenant_id", tenant_id),
                client=self._client,
                body=body,
                idempotency_key=idempotency_key,
            )
        )


class Tern:
    """The Tern API by resource, every request SigV4-signed:
    ``Tern(url, region).endpoints.create("tnt_acme", url="https://...")``.

    The arguments are :func:`tern_client.create_client`'s. ``raw`` is the generated client
    it builds (``tern_api.AuthenticatedClient``), for the generated calls themselves. Use
    it as a context manager, or call :meth:`close`, to close its connections.

    :param base_url: the stacks' ApiUrl output, or TERN_API_URL from .tern/local.env
    :param region: the API's region (us-east-1 in local mode)
    :param credentials: ``botocore.credentials.Credentials``; default botocore's chain
    :param timeout_seconds: per-request timeout, seconds (default 30)
    """

    def __init__(
        self,
        base_url: str,
        region: str,
        credentials: Credentials | None = None,
        *,
        timeout_seconds: float = 30.0,
        **httpx_args: Any,
    ) -> None:
        #: The generated, signed client the facade calls.
        self.raw: AuthenticatedClient = create_client(
            base_url, region, credentials, timeout_seconds=timeout_seconds, **httpx_args
        )
        #: ``listEndpoints`` ... ``recoverEndpoint``.
        self.endpoints = Endpoints(self.raw)
        #: ``publishEvent``, ``getEvent``, ``listEventAttempts``, ``resendEvent``.
        self.events = Events(self.raw)
        #: ``listDeadLetters``, ``replayDeadLetters``.
        self.dead_letters = DeadLetters(self.raw)
        #: ``createPortalSession``.
        self.portal = Portal(self.raw)

    def close(self) -> None:
        """Closes the client's connections."""
        self.raw.get_httpx_client().close()

    def __enter__(self) -> Self:
        """The facade itself; its connections close on exit."""
        return self

    def __exit__(self, *args: object) -> None:
        """Closes the connections."""
        self.close()
