from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.endpoint_pace import EndpointPace
    from ..models.last_failure import LastFailure


T = TypeVar("T", bound="EndpointHealth")


@_attrs_define
class EndpointHealth:
    """An endpoint's health, as `tern endpoints health` shows it.

    Attributes:
        attempts_24h (int): Attempts in 24 hours.
        attempts_window (int): Attempts in the window.
        consecutive_failures (int): Failed attempts since the last success.
        endpoint_id (str): Endpoint.
        report_pending (bool): True while a change of its health was decided but its operational event is not
            published yet (the next batch for the endpoint publishes it).
        state (str): `healthy`, `degraded`, `paused`, `open` or `disabled`.
        waiting (int): Deliveries waiting for a later attempt (retries scheduled, and deliveries held back
            by the circuit, a pause or the rate limit); a lower bound when `waiting_complete`
            is false.
        waiting_complete (bool): False when the endpoint had more waiting deliveries than one answer counts (10,000).
        window_seconds (int): The window, seconds.
        below_since (datetime.datetime | None | Unset): Since when the success rate is below the disable threshold.
        circuit_opened_at (datetime.datetime | None | Unset): While the circuit is open: when it opened.
        disabled_reason (None | str | Unset): Why it is disabled.
        failing_since (datetime.datetime | None | Unset): When the current run of failures began (the first failed
            attempt after the last
            success); `null` while the last attempt succeeded.
        last_failure (LastFailure | None | Unset):
        last_success_at (datetime.datetime | None | Unset): Last success.
        next_due_at (datetime.datetime | None | Unset): When the soonest waiting delivery is due.
        next_probe_at (datetime.datetime | None | Unset): While the circuit is open: when the next probe may go.
        pace (EndpointPace | None | Unset):
        paused_until (datetime.datetime | None | Unset): While the receiver's pause lasts: when it ends.
        success_rate_24h (float | None | Unset): Successes / attempts over 24 hours.
        success_rate_window (float | None | Unset): Successes / attempts over the window, 0..=1; `null` without
            attempts.
    """

    attempts_24h: int
    attempts_window: int
    consecutive_failures: int
    endpoint_id: str
    report_pending: bool
    state: str
    waiting: int
    waiting_complete: bool
    window_seconds: int
    below_since: datetime.datetime | None | Unset = UNSET
    circuit_opened_at: datetime.datetime | None | Unset = UNSET
    disabled_reason: None | str | Unset = UNSET
    failing_since: datetime.datetime | None | Unset = UNSET
    last_failure: LastFailure | None | Unset = UNSET
    last_success_at: datetime.datetime | None | Unset = UNSET
    next_due_at: datetime.datetime | None | Unset = UNSET
    next_probe_at: datetime.datetime | None | Unset = UNSET
    pace: EndpointPace | None | Unset = UNSET
    paused_until: datetime.datetime | None | Unset = UNSET
    success_rate_24h: float | None | Unset = UNSET
    success_rate_window: float | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.endpoint_pace import EndpointPace
        from ..models.last_failure import LastFailure

        attempts_24h = self.attempts_24h

        attempts_window = self.attempts_window

        consecutive_failures = self.consecutive_failures

        endpoint_id = self.endpoint_id

        report_pending = self.report_pending

        state = self.state

        waiting = self.waiting

        waiting_complete = self.waiting_complete

        window_seconds = self.window_seconds

        below_since: None | str | Unset
        if isinstance(self.below_since, Unset):
            below_since = UNSET
        elif isinstance(self.below_since, datetime.datetime):
            below_since = self.below_since.isoformat()
        else:
            below_since = self.below_since

        circuit_opened_at: None | str | Unset
        if isinstance(self.circuit_opened_at, Unset):
            circuit_opened_at = UNSET
        elif isinstance(self.circuit_opened_at, datetime.datetime):
            circuit_opened_at = self.circuit_opened_at.isoformat()
        else:
            circuit_opened_at = self.circuit_opened_at

        disabled_reason: None | str | Unset
        if isinstance(self.disabled_reason, Unset):
            disabled_reason = UNSET
        else:
            disabled_reason = self.disabled_reason

        failing_since: None | str | Unset
        if isinstance(self.failing_since, Unset):
            failing_since = UNSET
        elif isinstance(self.failing_since, datetime.datetime):
            failing_since = self.failing_since.isoformat()
        else:
            failing_since = self.failing_since

        last_failure: dict[str, Any] | None | Unset
        if isinstance(self.last_failure, Unset):
            last_failure = UNSET
        elif isinstance(self.last_failure, LastFailure):
            last_failure = self.last_failure.to_dict()
        else:
            last_failure = self.last_failure

        last_success_at: None | str | Unset
        if isinstance(self.last_success_at, Unset):
            last_success_at = UNSET
        elif isinstance(self.last_success_at, datetime.datetime):
            last_success_at = self.last_success_at.isoformat()
        else:
            last_success_at = self.last_success_at

        next_due_at: None | str | Unset
        if isinstance(self.next_due_at, Unset):
            next_due_at = UNSET
        elif isinstance(self.next_due_at, datetime.datetime):
            next_due_at = self.next_due_at.isoformat()
        else:
            next_due_at = self.next_due_at

        next_probe_at: None | str | Unset
        if isinstance(self.next_probe_at, Unset):
            next_probe_at = UNSET
        elif isinstance(self.next_probe_at, datetime.datetime):
            next_probe_at = self.next_probe_at.isoformat()
        else:
            next_probe_at = self.next_probe_at

        pace: dict[str, Any] | None | Unset
        if isinstance(self.pace, Unset):
            pace = UNSET
        elif isinstance(self.pace, EndpointPace):
            pace = self.pace.to_dict()
        else:
            pace = self.pace

        paused_until: None | str | Unset
        if isinstance(self.paused_until, Unset):
            paused_until = UNSET
        elif isinstance(self.paused_until, datetime.datetime):
            paused_until = self.paused_until.isoformat()
        else:
            paused_until = self.paused_until

        success_rate_24h: float | None | Unset
        if isinstance(self.success_rate_24h, Unset):
            success_rate_24h = UNSET
        else:
            success_rate_24h = self.success_rate_24h

        success_rate_window: float | None | Unset
        if isinstance(self.success_rate_window, Unset):
            success_rate_window = UNSET
        else:
            success_rate_window = self.success_rate_window

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "attempts_24h": attempts_24h,
                "attempts_window": attempts_window,
                "consecutive_failures": consecutive_failures,
                "endpoint_id": endpoint_id,
                "report_pending": report_pending,
                "state": state,
                "waiting": waiting,
                "waiting_complete": waiting_complete,
                "window_seconds": window_seconds,
            }
        )
        if below_since is not UNSET:
            field_dict["below_since"] = below_since
        if circuit_opened_at is not UNSET:
            field_dict["circuit_opened_at"] = circuit_opened_at
        if disabled_reason is not UNSET:
            field_dict["disabled_reason"] = disabled_reason
        if failing_since is not UNSET:
            field_dict["failing_since"] = failing_since
        if last_failure is not UNSET:
            field_dict["last_failure"] = last_failure
        if last_success_at is not UNSET:
            field_dict["last_success_at"] = last_success_at
        if next_due_at is not UNSET:
            field_dict["next_due_at"] = next_due_at
        if next_probe_at is not UNSET:
            field_dict["next_probe_at"] = next_probe_at
        if pace is not UNSET:
            field_dict["pace"] = pace
        if paused_until is not UNSET:
            field_dict["paused_until"] = paused_until
        if success_rate_24h is not UNSET:
            field_dict["success_rate_24h"] = success_rate_24h
        if success_rate_window is not UNSET:
            field_dict["success_rate_window"] = success_rate_window

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.endpoint_pace import EndpointPace
        from ..models.last_failure import LastFailure

        d = dict(src_dict)
        attempts_24h = d.pop("attempts_24h")

        attempts_window = d.pop("attempts_window")

        consecutive_failures = d.pop("consecutive_failures")

        endpoint_id = d.pop("endpoint_id")

        report_pending = d.pop("report_pending")

        state = d.pop("state")

        waiting = d.pop("waiting")

        waiting_complete = d.pop("waiting_complete")

        window_seconds = d.pop("window_seconds")

        def _parse_below_since(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                below_since_type_0 = datetime.datetime.fromisoformat(data)

                return below_since_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        below_since = _parse_below_since(d.pop("below_since", UNSET))

        def _parse_circuit_opened_at(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                circuit_opened_at_type_0 = datetime.datetime.fromisoformat(data)

                return circuit_opened_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        circuit_opened_at = _parse_circuit_opened_at(d.pop("circuit_opened_at", UNSET))

        def _parse_disabled_reason(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        disabled_reason = _parse_disabled_reason(d.pop("disabled_reason", UNSET))

        def _parse_failing_since(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                failing_since_type_0 = datetime.datetime.fromisoformat(data)

                return failing_since_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        failing_since = _parse_failing_since(d.pop("failing_since", UNSET))

        def _parse_last_failure(data: object) -> LastFailure | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                last_failure_type_0 = LastFailure.from_dict(data)

                return last_failure_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(LastFailure | None | Unset, data)

        last_failure = _parse_last_failure(d.pop("last_failure", UNSET))

        def _parse_last_success_at(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                last_success_at_type_0 = datetime.datetime.fromisoformat(data)

                return last_success_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        last_success_at = _parse_last_success_at(d.pop("last_success_at", UNSET))

        def _parse_next_due_at(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                next_due_at_type_0 = datetime.datetime.fromisoformat(data)

                return next_due_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        next_due_at = _parse_next_due_at(d.pop("next_due_at", UNSET))

        def _parse_next_probe_at(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                next_probe_at_type_0 = datetime.datetime.fromisoformat(data)

                return next_probe_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        next_probe_at = _parse_next_probe_at(d.pop("next_probe_at", UNSET))

        def _parse_pace(data: object) -> EndpointPace | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                pace_type_0 = EndpointPace.from_dict(data)

                return pace_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(EndpointPace | None | Unset, data)

        pace = _parse_pace(d.pop("pace", UNSET))

        def _parse_paused_until(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                paused_until_type_0 = datetime.datetime.fromisoformat(data)

                return paused_until_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        paused_until = _parse_paused_until(d.pop("paused_until", UNSET))

        def _parse_success_rate_24h(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        success_rate_24h = _parse_success_rate_24h(d.pop("success_rate_24h", UNSET))

        def _parse_success_rate_window(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        success_rate_window = _parse_success_rate_window(
            d.pop("success_rate_window", UNSET)
        )

        endpoint_health = cls(
            attempts_24h=attempts_24h,
            attempts_window=attempts_window,
            consecutive_failures=consecutive_failures,
            endpoint_id=endpoint_id,
            report_pending=report_pending,
            state=state,
            waiting=waiting,
            waiting_complete=waiting_complete,
            window_seconds=window_seconds,
            below_since=below_since,
            circuit_opened_at=circuit_opened_at,
            disabled_reason=disabled_reason,
            failing_since=failing_since,
            last_failure=last_failure,
            last_success_at=last_success_at,
            next_due_at=next_due_at,
            next_probe_at=next_probe_at,
            pace=pace,
            paused_until=paused_until,
            success_rate_24h=success_rate_24h,
            success_rate_window=success_rate_window,
        )

        endpoint_health.additional_properties = d
        return endpoint_health

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
