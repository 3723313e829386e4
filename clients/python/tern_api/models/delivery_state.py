from enum import StrEnum


class DeliveryState(StrEnum):
    DEAD_LETTERED = "dead_lettered"
    DELIVERED = "delivered"
    IN_FLIGHT = "in_flight"
    PENDING = "pending"
    RETRYING = "retrying"

    def __str__(self) -> str:
        return str(self.value)
