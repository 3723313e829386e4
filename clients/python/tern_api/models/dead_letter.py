from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="DeadLetter")


@_attrs_define
class DeadLetter:
    """One dead letter (a sample of its group).

    Attributes:
        payload_sample (str): The payload, cut to 500 characters.
        payload_truncated (bool): True when cut.
        reason (str): Why.
        attempts (int | None | Unset): Attempts in the budget that ended here.
        dead_lettered_at (datetime.datetime | None | Unset): When.
        endpoint_id (None | str | Unset): Endpoint.
        event_id (None | str | Unset): Event id (`webhook-id`).
        event_type (None | str | Unset): Event type.
        last_error (None | str | Unset): Last error.
        last_status (int | None | Unset): Last status.
        replay_count (int | None | Unset): Replays so far.
    """

    payload_sample: str
    payload_truncated: bool
    reason: str
    attempts: int | None | Unset = UNSET
    dead_lettered_at: datetime.datetime | None | Unset = UNSET
    endpoint_id: None | str | Unset = UNSET
    event_id: None | str | Unset = UNSET
    event_type: None | str | Unset = UNSET
    last_error: None | str | Unset = UNSET
    last_status: int | None | Unset = UNSET
    replay_count: int | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        payload_sample = self.payload_sample

        payload_truncated = self.payload_truncated

        reason = self.reason

        attempts: int | None | Unset
        if isinstance(self.attempts, Unset):
            attempts = UNSET
        else:
            attempts = self.attempts

        dead_lettered_at: None | str | Unset
        if isinstance(self.dead_lettered_at, Unset):
            dead_lettered_at = UNSET
        elif isinstance(self.dead_lettered_at, datetime.datetime):
            dead_lettered_at = self.dead_lettered_at.isoformat()
        else:
            dead_lettered_at = self.dead_lettered_at

        endpoint_id: None | str | Unset
        if isinstance(self.endpoint_id, Unset):
            endpoint_id = UNSET
        else:
            endpoint_id = self.endpoint_id

        event_id: None | str | Unset
        if isinstance(self.event_id, Unset):
            event_id = UNSET
        else:
            event_id = self.event_id

        event_type: None | str | Unset
        if isinstance(self.event_type, Unset):
            event_type = UNSET
        else:
            event_type = self.event_type

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

        replay_count: int | None | Unset
        if isinstance(self.replay_count, Unset):
            replay_count = UNSET
        else:
            replay_count = self.replay_count

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "payload_sample": payload_sample,
                "payload_truncated": payload_truncated,
                "reason": reason,
            }
        )
        if attempts is not UNSET:
            field_dict["attempts"] = attempts
        if dead_lettered_at is not UNSET:
            field_dict["dead_lettered_at"] = dead_lettered_at
        if endpoint_id is not UNSET:
            field_dict["endpoint_id"] = endpoint_id
        if event_id is not UNSET:
            field_dict["event_id"] = event_id
        if event_type is not UNSET:
            field_dict["event_type"] = event_type
        if last_error is not UNSET:
            field_dict["last_error"] = last_error
        if last_status is not UNSET:
            field_dict["last_status"] = last_status
        if replay_count is not UNSET:
            field_dict["replay_count"] = replay_count

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        payload_sample = d.pop("payload_sample")

        payload_truncated = d.pop("payload_truncated")

        reason = d.pop("reason")

        def _parse_attempts(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        attempts = _parse_attempts(d.pop("attempts", UNSET))

        def _parse_dead_lettered_at(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                dead_lettered_at_type_0 = datetime.datetime.fromisoformat(data)

                return dead_lettered_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        dead_lettered_at = _parse_dead_lettered_at(d.pop("dead_lettered_at", UNSET))

        def _parse_endpoint_id(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        endpoint_id = _parse_endpoint_id(d.pop("endpoint_id", UNSET))

        def _parse_event_id(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        event_id = _parse_event_id(d.pop("event_id", UNSET))

        def _parse_event_type(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        event_type = _parse_event_type(d.pop("event_type", UNSET))

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

        def _parse_replay_count(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        replay_count = _parse_replay_count(d.pop("replay_count", UNSET))

        dead_letter = cls(
            payload_sample=payload_sample,
            payload_truncated=payload_truncated,
            reason=reason,
            attempts=attempts,
            dead_lettered_at=dead_lettered_at,
            endpoint_id=endpoint_id,
            event_id=event_id,
            event_type=event_type,
            last_error=last_error,
            last_status=last_status,
            replay_count=replay_count,
        )

        dead_letter.additional_properties = d
        return dead_letter

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
