from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.dead_letter import DeadLetter


T = TypeVar("T", bound="DeadLetterGroup")


@_attrs_define
class DeadLetterGroup:
    """Dead letters of one endpoint with one reason.

    Attributes:
        count (int): Dead letters in the group (among those read).
        reason (str): Reason.
        sample (DeadLetter): One dead letter (a sample of its group).
        endpoint_id (None | str | Unset): Endpoint.
        last_error (None | str | Unset): Last error of the newest.
        last_status (int | None | Unset): Last status of the newest.
        newest (datetime.datetime | None | Unset): Newest dead-letter time.
        oldest (datetime.datetime | None | Unset): Oldest dead-letter time.
    """

    count: int
    reason: str
    sample: DeadLetter
    endpoint_id: None | str | Unset = UNSET
    last_error: None | str | Unset = UNSET
    last_status: int | None | Unset = UNSET
    newest: datetime.datetime | None | Unset = UNSET
    oldest: datetime.datetime | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        count = self.count

        reason = self.reason

        sample = self.sample.to_dict()

        endpoint_id: None | str | Unset
        if isinstance(self.endpoint_id, Unset):
            endpoint_id = UNSET
        else:
            endpoint_id = self.endpoint_id

        last_error: None | str | Unset
        if isinstance(self.last_error, Unset):
            last_error = UNSET
        else:
            last_error = self.last_error

        last_status: int | None | Unset
        if isinstance(self.last_status, Unset):
            last_status = UNSET
        else:
            last_status = self.last_status

        newest: None | str | Unset
        if isinstance(self.newest, Unset):
            newest = UNSET
        elif isinstance(self.newest, datetime.datetime):
            newest = self.newest.isoformat()
        else:
            newest = self.newest

        oldest: None | str | Unset
        if isinstance(self.oldest, Unset):
            oldest = UNSET
        elif isinstance(self.oldest, datetime.datetime):
            oldest = self.oldest.isoformat()
        else:
            oldest = self.oldest

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "count": count,
                "reason": reason,
                "sample": sample,
            }
        )
        if endpoint_id is not UNSET:
            field_dict["endpoint_id"] = endpoint_id
        if last_error is not UNSET:
            field_dict["last_error"] = last_error
        if last_status is not UNSET:
            field_dict["last_status"] = last_status
        if newest is not UNSET:
            field_dict["newest"] = newest
        if oldest is not UNSET:
            field_dict["oldest"] = oldest

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.dead_letter import DeadLetter

        d = dict(src_dict)
        count = d.pop("count")

        reason = d.pop("reason")

        sample = DeadLetter.from_dict(d.pop("sample"))

        def _parse_endpoint_id(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        endpoint_id = _parse_endpoint_id(d.pop("endpoint_id", UNSET))

        def _parse_last_error(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        last_error = _parse_last_error(d.pop("last_error", UNSET))

        def _parse_last_status(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        last_status = _parse_last_status(d.pop("last_status", UNSET))

        def _parse_newest(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                newest_type_0 = datetime.datetime.fromisoformat(data)

                return newest_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        newest = _parse_newest(d.pop("newest", UNSET))

        def _parse_oldest(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                oldest_type_0 = datetime.datetime.fromisoformat(data)

                return oldest_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        oldest = _parse_oldest(d.pop("oldest", UNSET))

        dead_letter_group = cls(
            count=count,
            reason=reason,
            sample=sample,
            endpoint_id=endpoint_id,
            last_error=last_error,
            last_status=last_status,
            newest=newest,
            oldest=oldest,
        )

        dead_letter_group.additional_properties = d
        return dead_letter_group

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
