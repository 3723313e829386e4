"""Contains all the data models used in inputs/outputs"""

from .attempt import Attempt
from .auth_basic import AuthBasic
from .auth_basic_type import AuthBasicType
from .auth_bearer import AuthBearer
from .auth_bearer_type import AuthBearerType
from .auth_none import AuthNone
from .auth_none_type import AuthNoneType
from .auth_oauth_2_client_credentials import AuthOauth2ClientCredentials
from .auth_oauth_2_client_credentials_type import AuthOauth2ClientCredentialsType
from .client_auth_method import ClientAuthMethod
from .custom_header import CustomHeader
from .custom_header_setting import CustomHeaderSetting
from .dead_letter import DeadLetter
from .dead_letter_group import DeadLetterGroup
from .dead_letter_groups import DeadLetterGroups
from .dead_letter_reason_name import DeadLetterReasonName
from .dead_lettered_budget import DeadLetteredBudget
from .delivery_state import DeliveryState
from .delivery_status import DeliveryStatus
from .disable_request import DisableRequest
from .endpoint import Endpoint
from .endpoint_attempt import EndpointAttempt
from .endpoint_attempt_list import EndpointAttemptList
from .endpoint_created import EndpointCreated
from .endpoint_health import EndpointHealth
from .endpoint_list import EndpointList
from .endpoint_pace import EndpointPace
from .endpoint_patch import EndpointPatch
from .endpoint_state_filter import EndpointStateFilter
from .event import Event
from .event_attempts import EventAttempts
from .event_batch_result import EventBatchResult
from .event_payload_type_0 import EventPayloadType0
from .last_failure import LastFailure
from .new_endpoint import NewEndpoint
from .new_event import NewEvent
from .new_event_batch import NewEventBatch
from .new_event_payload import NewEventPayload
from .outcome_filter import OutcomeFilter
from .payload_format import PayloadFormat
from .portal_session import PortalSession
from .portal_session_request import PortalSessionRequest
from .problem import Problem
from .published_event import PublishedEvent
from .published_event_batch import PublishedEventBatch
from .receiver_auth_type import ReceiverAuthType
from .receiver_auth_view import ReceiverAuthView
from .recover_report import RecoverReport
from .recover_request import RecoverRequest
from .replay_report import ReplayReport
from .replay_request import ReplayRequest
from .resend import Resend
from .rotate_secret_request import RotateSecretRequest
from .rotate_signing_key_request import RotateSigningKeyRequest
from .rotated_secret import RotatedSecret
from .rotated_signing_key import RotatedSigningKey
from .secret_info import SecretInfo
from .signatures import Signatures
from .signing_key_info import SigningKeyInfo
from .test_send import TestSend
from .waiting_report import WaitingReport

__all__ = (
    "Attempt",
    "AuthBasic",
    "AuthBasicType",
    "AuthBearer",
    "AuthBearerType",
    "AuthNone",
    "AuthNoneType",
    "AuthOauth2ClientCredentials",
    "AuthOauth2ClientCredentialsType",
    "ClientAuthMethod",
    "CustomHeader",
    "CustomHeaderSetting",
    "DeadLetter",
    "DeadLetterGroup",
    "DeadLetterGroups",
    "DeadLetterReasonName",
    "DeadLetteredBudget",
    "DeliveryState",
    "DeliveryStatus",
    "DisableRequest",
    "Endpoint",
    "EndpointAttempt",
    "EndpointAttemptList",
    "EndpointCreated",
    "EndpointHealth",
    "EndpointList",
    "EndpointPace",
    "EndpointPatch",
    "EndpointStateFilter",
    "Event",
    "EventAttempts",
    "EventBatchResult",
    "EventPayloadType0",
    "LastFailure",
    "NewEndpoint",
    "NewEvent",
    "NewEventBatch",
    "NewEventPayload",
    "OutcomeFilter",
    "PayloadFormat",
    "PortalSession",
    "PortalSessionRequest",
    "Problem",
    "PublishedEvent",
    "PublishedEventBatch",
    "ReceiverAuthType",
    "ReceiverAuthView",
    "RecoverReport",
    "RecoverRequest",
    "ReplayReport",
    "ReplayRequest",
    "Resend",
    "RotateSecretRequest",
    "RotateSigningKeyRequest",
    "RotatedSecret",
    "RotatedSigningKey",
    "SecretInfo",
    "Signatures",
    "SigningKeyInfo",
    "TestSend",
    "WaitingReport",
)
