from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.client_auth_method import ClientAuthMethod
from ..models.receiver_auth_type import ReceiverAuthType
from ..types import UNSET, Unset

T = TypeVar("T", bound="ReceiverAuthView")


@_attrs_define
class ReceiverAuthView:
    """An endpoint's authentication as answered: every setting but its secret, which is only
    named (`secret`).

        Attributes:
            type_ (ReceiverAuthType): The type of an endpoint's authentication.
            audience (None | str | Unset): OAuth2: the audience.
            client_auth (ClientAuthMethod | None | Unset):
            client_id (None | str | Unset): OAuth2: the client id.
            scope (None | str | Unset): OAuth2: the scopes.
            secret (None | str | Unset): Which secret the setting holds, never its value: `password`, `token` or
                `client_secret`; absent for `none`.
            token_url (None | str | Unset): OAuth2: the token endpoint.
            username (None | str | Unset): Basic: the user name.
    """

    type_: ReceiverAuthType
    audience: None | str | Unset = UNSET
    client_auth: ClientAuthMethod | None | Unset = UNSET
    client_id: None | str | Unset = UNSET
    scope: None | str | Unset = UNSET
    secret: None | str | Unset = UNSET
    token_url: None | str | Unset = UNSET
    username: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
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

        client_id: None | str | Unset
        if isinstance(self.client_id, Unset):
            client_id = UNSET
        else:
            client_id = self.client_id

        scope: None | str | Unset
        if isinstance(self.scope, Unset):
            scope = UNSET
        else:
            scope = self.scope

        secret: None | str | Unset
        if isinstance(self.secret, Unset):
            secret = UNSET
        else:
            secret = self.secret

        token_url: None | str | Unset
        if isinstance(self.token_url, Unset):
            token_url = UNSET
        else:
            token_url = self.token_url

        username: None | str | Unset
        if isinstance(self.username, Unset):
            username = UNSET
        else:
            username = self.username

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "type": type_,
            }
        )
        if audience is not UNSET:
            field_dict["audience"] = audience
        if client_auth is not UNSET:
            field_dict["client_auth"] = client_auth
        if client_id is not UNSET:
            field_dict["client_id"] = client_id
        if scope is not UNSET:
            field_dict["scope"] = scope
        if secret is not UNSET:
            field_dict["secret"] = secret
        if token_url is not UNSET:
            field_dict["token_url"] = token_url
        if username is not UNSET:
            field_dict["username"] = username

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        type_ = ReceiverAuthType(d.pop("type"))

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

        def _parse_client_id(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        client_id = _parse_client_id(d.pop("client_id", UNSET))

        def _parse_scope(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        scope = _parse_scope(d.pop("scope", UNSET))

        def _parse_secret(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        secret = _parse_secret(d.pop("secret", UNSET))

        def _parse_token_url(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        token_url = _parse_token_url(d.pop("token_url", UNSET))

        def _parse_username(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        username = _parse_username(d.pop("username", UNSET))

        receiver_auth_view = cls(
            type_=type_,
            audience=audience,
            client_auth=client_auth,
            client_id=client_id,
            scope=scope,
            secret=secret,
            token_url=token_url,
            username=username,
        )

        receiver_auth_view.additional_properties = d
        return receiver_auth_view

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
