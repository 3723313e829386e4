from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define

from ..models.auth_none_type import AuthNoneType

T = TypeVar("T", bound="AuthNone")


@_attrs_define
class AuthNone:
    """No `authorization` header: the signatures authenticate the request.

    Attributes:
        type_ (AuthNoneType): `none`.
    """

    type_: AuthNoneType

    def to_dict(self) -> dict[str, Any]:
        type_ = self.type_.value

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "type": type_,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        type_ = AuthNoneType(d.pop("type"))

        auth_none = cls(
            type_=type_,
        )

        return auth_none
