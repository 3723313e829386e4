from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="RotateSigningKeyRequest")


@_attrs_define
class RotateSigningKeyRequest:
    """Rotating an endpoint's Ed25519 signing key.

    Attributes:
        overlap_hours (int | None | Unset): Hours the old key keeps signing `v1a` next to the new one, 0..=720 (default
            24).
    """

    overlap_hours: int | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        overlap_hours: int | None | Unset
        if isinstance(self.overlap_hours, Unset):
            overlap_hours = UNSET
        else:
            overlap_hours = self.overlap_hours

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if overlap_hours is not UNSET:
            field_dict["overlap_hours"] = overlap_hours

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)

        def _parse_overlap_hours(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        overlap_hours = _parse_overlap_hours(d.pop("overlap_hours", UNSET))

        rotate_signing_key_request = cls(
            overlap_hours=overlap_hours,
        )

        return rotate_signing_key_request
