"""tern-client: the Tern API (the :class:`Tern` facade over the generated client, every
request SigV4-signed) and the transactional outbox builder."""

from .auth import SigV4HttpxAuth
from .canonical import canonical_json
from .client import TernApiError, create_client, unwrap
from .facade import Tern
from . import trace_context
from .outbox import CURRENT, OutboxError, OutboxWriter, PreparedEvent, generate_event_id, outbox_key

__all__ = [
    "CURRENT",
    "OutboxError",
    "OutboxWriter",
    "PreparedEvent",
    "SigV4HttpxAuth",
    "Tern",
    "TernApiError",
    "canonical_json",
    "create_client",
    "generate_event_id",
    "outbox_key",
    "trace_context",
    "unwrap",
]
