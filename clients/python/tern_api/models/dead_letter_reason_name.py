from enum import StrEnum


class DeadLetterReasonName(StrEnum):
    BLOCKED_DESTINATION = "blocked_destination"
    ENDPOINT_DELETED = "endpoint_deleted"
    ENDPOINT_DISABLED = "endpoint_disabled"
    EXHAUSTED = "exhausted"
    GONE = "gone"
    MALFORMED_MESSAGE = "malformed_message"
    NO_ACTIVE_SECRET = "no_active_secret"

    def __str__(self) -> str:
        return str(self.value)
