from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..models.auth_basic_type import AuthBasicType
from ..types import UNSET, Unset

T = TypeVar("T", bound="AuthBasic")


@_attrs_define
class AuthBasic:
    """`authorization: Basic base64(username:password)` (RFC 7617).

    Attributes:
        type_ (AuthBasicType): `basic`.
        username (str): The user name: 1-1,024 bytes, no `:` (RFC 7617 §2), no control characters.
        password (None | str | Unset): The password: at most 8,192 bytes, no control characters. Write-only. Required
            at creation; in a PATCH left out (or `null`) keeps the stored password when the
            stored authentication is `basic` with the same user name.
    """

    type_: AuthBasicType
    username: str
    password: None | str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        type_ = self.type_.value

        username = self.username

        password: None | str | Unset
        if isinstance(self.password, Unset):
            password = UNSET
        else:
            password = self.password

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "type": type_,
                "username": username,
            }
        )
        if password is not UNSET:
            field_dict["password"] = password

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        type_ = AuthBasicType(d.pop("type"))

        username = d.pop("username")

        def _parse_password(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        password = _parse_password(d.pop("password", UNSET))

        auth_basic = cls(
            type_=type_,
            username=username,
            password=password,
        )

        return auth_basic
