from enum import StrEnum


class OutcomeFilter(StrEnum):
    DEAD_LETTER = "dead_letter"
    DELIVERED = "delivered"
    FAILED = "failed"
    RETRY = "retry"

    def __str__(self) -> str:
        return str(self.value)
