from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..models.auth_bearer_type import AuthBearerType
from ..types import UNSET, Unset

T = TypeVar("T", bound="AuthBearer")


@_attrs_define
class AuthBearer:
    """`authorization: Bearer <token>` with a fixed token (RFC 6750 §2.1).

    Attributes:
        type_ (AuthBearerType): `bearer`.
        token (None | str | Unset): The token: 1-8,192 bytes of visible ASCII without spaces. Write-only. Required at
            creation; in a PATCH left out (or `null`) keeps the stored token when the stored
            authentication is `bearer`.
    """

    type_: AuthBearerType
    token: None | str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        type_ = self.type_.value

        token: None | str | Unset
        if isinstance(self.token, Unset):
            token = UNSET
        else:
            token = self.token

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "type": type_,
            }
        )
        if token is not UNSET:
            field_dict["token"] = token

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        type_ = AuthBearerType(d.pop("type"))

        def _parse_token(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        token = _parse_token(d.pop("token", UNSET))

        auth_bearer = cls(
            type_=type_,
            token=token,
        )

        return auth_bearer
