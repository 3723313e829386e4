from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..models.auth_oauth_2_client_credentials_type import (
    AuthOauth2ClientCredentialsType,
)
from ..models.client_auth_method import ClientAuthMethod
from ..types import UNSET, Unset

T = TypeVar("T", bound="AuthOauth2ClientCredentials")


@_attrs_define
class AuthOauth2ClientCredentials:
    """`authorization: Bearer <access token>`, the token got from the receiver's token
    endpoint with the client credentials grant (RFC 6749 §4.4), cached and refreshed by
    the sender.

        Attributes:
            client_id (str): The client id: 1-1,024 bytes of printable ASCII.
            token_url (str): The token endpoint: an http(s) URL of at most 2,048 bytes without credentials,
                checked by the same SSRF guard as the endpoint's URL (no private, loopback,
                link-local or metadata address unless the deployment allows it).
            type_ (AuthOauth2ClientCredentialsType): `oauth2_client_credentials`.
            audience (None | str | Unset): The API the token is for, sent as `audience` (Auth0 and others require it):
                1-1,024 bytes of printable ASCII; none by default.
            client_auth (ClientAuthMethod | None | Unset):
            client_secret (None | str | Unset): The client secret: 1-8,192 bytes of printable ASCII. Write-only. Required at
                creation; in a PATCH left out (or `null`) keeps the stored secret when the stored
                authentication is `oauth2_client_credentials` with the same `token_url` and
                `client_id` (a secret never goes to another token endpoint or client unless it is
                given again).
            scope (None | str | Unset): Space-separated scopes (RFC 6749 §3.3), at most 1,024 bytes; none by default.
    """

    client_id: str
    token_url: str
    type_: AuthOauth2ClientCredentialsType
    audience: None | str | Unset = UNSET
    client_auth: ClientAuthMethod | None | Unset = UNSET
    client_secret: None | str | Unset = UNSET
    scope: None | str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        client_id = self.client_id

        token_url = self.token_url

        type_ = self.type_.value

        audience: None | str | Unset
        if isinstance(self.audience, Unset):
            audience = UNSET
        else:
            audience = self.audience

        client_auth: None | str | Unset
        if isinstance(self.client_auth, Unset):
            client_auth = UNSET
        elif isinstance(self.client_auth, ClientAuthMethod):
            client_auth = self.client_auth.value
        else:
            client_auth = self.client_auth

        client_secret: None | str | Unset
        if isinstance(self.client_secret, Unset):
            client_secret = UNSET
        else:
            client_secret = self.client_secret

        scope: None | str | Unset
        if isinstance(self.scope, Unset):
            scope = UNSET
        else:
            scope = self.scope

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "client_id": client_id,
                "token_url": token_url,
                "type": type_,
            }
        )
        if audience is not UNSET:
            field_dict["audience"] = audience
        if client_auth is not UNSET:
            field_dict["client_auth"] = client_auth
        if client_secret is not UNSET:
            field_dict["client_secret"] = client_secret
        if scope is not UNSET:
            field_dict["scope"] = scope

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        client_id = d.pop("client_id")

        token_url = d.pop("token_url")

        type_ = AuthOauth2ClientCredentialsType(d.pop("type"))

        def _parse_audience(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        audience = _parse_audience(d.pop("audience", UNSET))

        def _parse_client_auth(data: object) -> ClientAuthMethod | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                client_auth_type_0 = ClientAuthMethod(data)

                return client_auth_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(ClientAuthMethod | None | Unset, data)

        client_auth = _parse_client_auth(d.pop("client_auth", UNSET))

        def _parse_client_secret(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        client_secret = _parse_client_secret(d.pop("client_secret", UNSET))

        def _parse_scope(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        scope = _parse_scope(d.pop("scope", UNSET))

        auth_oauth_2_client_credentials = cls(
            client_id=client_id,
            token_url=token_url,
            type_=type_,
            audience=audience,
            client_auth=client_auth,
            client_secret=client_secret,
            scope=scope,
        )

        return auth_oauth_2_client_credentials
