from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="RecoverRequest")


@_attrs_define
class RecoverRequest:
    """Recovering an endpoint over a window.

    Example:
        {'enable': True, 'since': '2026-12-01T09:00:00Z', 'until': '2026-12-01T11:00:00Z'}

    Attributes:
        since (datetime.datetime): Failures at or after this time.
        enable (bool | Unset): Enable the endpoint first if it is disabled (else a disabled endpoint is a 409).
        until (datetime.datetime | None | Unset): Failures before this time (exclusive); default now.
    """

    since: datetime.datetime
    enable: bool | Unset = UNSET
    until: datetime.datetime | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        since = self.since.isoformat()

        enable = self.enable

        until: None | str | Unset
        if isinstance(self.until, Unset):
            until = UNSET
        elif isinstance(self.until, datetime.datetime):
            until = self.until.isoformat()
        else:
            until = self.until

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "since": since,
            }
        )
        if enable is not UNSET:
            field_dict["enable"] = enable
        if until is not UNSET:
            field_dict["until"] = until

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        since = datetime.datetime.fromisoformat(d.pop("since"))

        enable = d.pop("enable", UNSET)

        def _parse_until(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                until_type_0 = datetime.datetime.fromisoformat(data)

                return until_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        until = _parse_until(d.pop("until", UNSET))

        recover_request = cls(
            since=since,
            enable=enable,
            until=until,
        )

        return recover_request
