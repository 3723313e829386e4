from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.problem import Problem
    from ..models.published_event import PublishedEvent


T = TypeVar("T", bound="EventBatchResult")


@_attrs_define
class EventBatchResult:
    """What happened to one event of a batch: its `status` is what `publishEvent` would have
    answered for it alone.

        Attributes:
            status (int): 202: published; 200: published before with this id (nothing written); otherwise the
                status of `problem` (400, 409, 413; 503: retry it).
            event (None | PublishedEvent | Unset):
            id (None | str | Unset): The event's id: the one given, or the `evt_` id made for it (also when it failed:
                publish it again with this id and a write that did land is not made twice). Absent
                when the id given is not an id.
            problem (None | Problem | Unset):
    """

    status: int
    event: None | PublishedEvent | Unset = UNSET
    id: None | str | Unset = UNSET
    problem: None | Problem | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.problem import Problem
        from ..models.published_event import PublishedEvent

        status = self.status

        event: dict[str, Any] | None | Unset
        if isinstance(self.event, Unset):
            event = UNSET
        elif isinstance(self.event, PublishedEvent):
            event = self.event.to_dict()
        else:
            event = self.event

        id: None | str | Unset
        if isinstance(self.id, Unset):
            id = UNSET
        else:
            id = self.id

        problem: dict[str, Any] | None | Unset
        if isinstance(self.problem, Unset):
            problem = UNSET
        elif isinstance(self.problem, Problem):
            problem = self.problem.to_dict()
        else:
            problem = self.problem

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "status": status,
            }
        )
        if event is not UNSET:
            field_dict["event"] = event
        if id is not UNSET:
            field_dict["id"] = id
        if problem is not UNSET:
            field_dict["problem"] = problem

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.problem import Problem
        from ..models.published_event import PublishedEvent

        d = dict(src_dict)
        status = d.pop("status")

        def _parse_event(data: object) -> None | PublishedEvent | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                event_type_0 = PublishedEvent.from_dict(data)

                return event_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | PublishedEvent | Unset, data)

        event = _parse_event(d.pop("event", UNSET))

        def _parse_id(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        id = _parse_id(d.pop("id", UNSET))

        def _parse_problem(data: object) -> None | Problem | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                problem_type_0 = Problem.from_dict(data)

                return problem_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | Problem | Unset, data)

        problem = _parse_problem(d.pop("problem", UNSET))

        event_batch_result = cls(
            status=status,
            event=event,
            id=id,
            problem=problem,
        )

        event_batch_result.additional_properties = d
        return event_batch_result

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
