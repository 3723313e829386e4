from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..models.dead_letter_reason_name import DeadLetterReasonName
from ..types import UNSET, Unset

T = TypeVar("T", bound="ReplayRequest")


@_attrs_define
class ReplayRequest:
    """Replaying this tenant's dead letters; every set filter must match.

    Attributes:
        dead_lettered_since (datetime.datetime | None | Unset): Only dead-lettered at or after.
        dead_lettered_until (datetime.datetime | None | Unset): Only dead-lettered before (exclusive).
        dry_run (bool | Unset): Count, move nothing.
        endpoint_id (None | str | Unset): Only this endpoint's.
        event_id (None | str | Unset): Only this event.
        event_type (None | str | Unset): Only this event type.
        force (bool | Unset): Force a replay to disabled or deleted endpoints (their deliveries come back at
            once).
        reason (DeadLetterReasonName | None | Unset):
    """

    dead_lettered_since: datetime.datetime | None | Unset = UNSET
    dead_lettered_until: datetime.datetime | None | Unset = UNSET
    dry_run: bool | Unset = UNSET
    endpoint_id: None | str | Unset = UNSET
    event_id: None | str | Unset = UNSET
    event_type: None | str | Unset = UNSET
    force: bool | Unset = UNSET
    reason: DeadLetterReasonName | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        dead_lettered_since: None | str | Unset
        if isinstance(self.dead_lettered_since, Unset):
            dead_lettered_since = UNSET
        elif isinstance(self.dead_lettered_since, datetime.datetime):
            dead_lettered_since = self.dead_lettered_since.isoformat()
        else:
            dead_lettered_since = self.dead_lettered_since

        dead_lettered_until: None | str | Unset
        if isinstance(self.dead_lettered_until, Unset):
            dead_lettered_until = UNSET
        elif isinstance(self.dead_lettered_until, datetime.datetime):
            dead_lettered_until = self.dead_lettered_until.isoformat()
        else:
            dead_lettered_until = self.dead_lettered_until

        dry_run = self.dry_run

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

        force = self.force

        reason: None | str | Unset
        if isinstance(self.reason, Unset):
            reason = UNSET
        elif isinstance(self.reason, DeadLetterReasonName):
            reason = self.reason.value
        else:
            reason = self.reason

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if dead_lettered_since is not UNSET:
            field_dict["dead_lettered_since"] = dead_lettered_since
        if dead_lettered_until is not UNSET:
            field_dict["dead_lettered_until"] = dead_lettered_until
        if dry_run is not UNSET:
            field_dict["dry_run"] = dry_run
        if endpoint_id is not UNSET:
            field_dict["endpoint_id"] = endpoint_id
        if event_id is not UNSET:
            field_dict["event_id"] = event_id
        if event_type is not UNSET:
            field_dict["event_type"] = event_type
        if force is not UNSET:
            field_dict["force"] = force
        if reason is not UNSET:
            field_dict["reason"] = reason

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)

        def _parse_dead_lettered_since(
            data: object,
        ) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                dead_lettered_since_type_0 = datetime.datetime.fromisoformat(data)

                return dead_lettered_since_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        dead_lettered_since = _parse_dead_lettered_since(
            d.pop("dead_lettered_since", UNSET)
        )

        def _parse_dead_lettered_until(
            data: object,
        ) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                dead_lettered_until_type_0 = datetime.datetime.fromisoformat(data)

                return dead_lettered_until_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        dead_lettered_until = _parse_dead_lettered_until(
            d.pop("dead_lettered_until", UNSET)
        )

        dry_run = d.pop("dry_run", UNSET)

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

        force = d.pop("force", UNSET)

        def _parse_reason(data: object) -> DeadLetterReasonName | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                reason_type_0 = DeadLetterReasonName(data)

                return reason_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(DeadLetterReasonName | None | Unset, data)

        reason = _parse_reason(d.pop("reason", UNSET))

        replay_request = cls(
            dead_lettered_since=dead_lettered_since,
            dead_lettered_until=dead_lettered_until,
            dry_run=dry_run,
            endpoint_id=endpoint_id,
            event_id=event_id,
            event_type=event_type,
            force=force,
            reason=reason,
        )

        return replay_request
