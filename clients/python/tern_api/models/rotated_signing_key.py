from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.endpoint import Endpoint


T = TypeVar("T", bound="RotatedSigningKey")


@_attrs_define
class RotatedSigningKey:
    """A rotated signing key: give its public key to the receiver (it is no secret; the
    endpoint's answers show it too).

        Attributes:
            endpoint (Endpoint): An endpoint. Its secrets appear as fingerprints only.
            public_key (str): The new public key (`whpk_...`); it signs `v1a` at once.
    """

    endpoint: Endpoint
    public_key: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        endpoint = self.endpoint.to_dict()

        public_key = self.public_key

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "endpoint": endpoint,
                "public_key": public_key,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.endpoint import Endpoint

        d = dict(src_dict)
        endpoint = Endpoint.from_dict(d.pop("endpoint"))

        public_key = d.pop("public_key")

        rotated_signing_key = cls(
            endpoint=endpoint,
            public_key=public_key,
        )

        rotated_signing_key.additional_properties = d
        return rotated_signing_key

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
