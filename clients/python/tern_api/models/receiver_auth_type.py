from enum import StrEnum


class ReceiverAuthType(StrEnum):
    BASIC = "basic"
    BEARER = "bearer"
    NONE = "none"
    OAUTH2_CLIENT_CREDENTIALS = "oauth2_client_credentials"

    def __str__(self) -> str:
        return str(self.value)
