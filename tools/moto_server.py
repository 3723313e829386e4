"""moto server for Tern's local mode and tests, with eight fixes applied.

1. `sfn-copy`: moto 5.2.x deep-copies a state machine on every StartExecution, including
   its list of running executions, whose worker threads hold locks that cannot be copied:
   a second execution started while another one waits fails with HTTP 500 ("cannot pickle
   '_thread.RLock' object"). Tern starts one execution per long retry wait, many at once,
   so the copy here leaves the executions list out (the clone only needs the definition).
2. `dynamodb-lock`: moto serves requests on several threads and does not lock its
   DynamoDB tables, so two concurrent conditional writes to one item can both pass their
   condition. Real DynamoDB applies a conditional write atomically, and Tern's
   no-double-POST claim relies on that; here every DynamoDB item operation (and every
   DynamoDB Streams read) runs under one lock, which restores the guarantee.
3. `stream-rollback`: a cancelled TransactWriteItems (for example the outbox's
   `attribute_not_exists(event_id)` on a duplicate event id) makes moto put back a deep
   copy of each table it touched, with a new stream shard object. Shard iterators handed
   out before hold the old shard, which never receives another record, so a stream reader
   sees nothing written after the cancelled transaction. Here the rollback keeps the shard
   object readers hold and only puts back its records, as DynamoDB (which writes nothing
   to the stream for a cancelled transaction) behaves.
4. `sqs-lock`: moto does not lock its SQS queues across request threads; concurrent
   receive and delete can hand one message to two receivers, lose a message or bring a
   deleted one back. Every SQS message operation runs under one lock here; a long poll
   waits outside it.
5. `sqs-contents`: SQS refuses a message body or string attribute value holding a
   character outside `#x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF`
   (API reference, SendMessage: `InvalidMessageContents`); moto accepts anything. Here
   SendMessage fails with `InvalidMessageContents`, and SendMessageBatch reports such an
   entry in `Failed` with that code and sends the others (its documented errors have no
   InvalidMessageContents: the result of each entry is reported individually).
6. `sqs-retention`: for every message it hands out, moto's ReceiveMessage reads the
   queue's retention period by computing all queue attributes, three of which scan the
   whole queue: a receive of 10 costs 30 scans, so it grows with queue depth (docs/local-mode.md,
   local mode: about 45 ms per message received at 500 messages). Here the check reads
   the retention period alone; the rule (a message older than it is not delivered) is
   moto's.
7. `sqs-send`: for every message it accepts, moto's SendMessage (and each entry of
   SendMessageBatch) computes every queue attribute, three of which scan the whole queue,
   only to read `ContentBasedDeduplication`, which a standard queue does not have: a batch
   of 10 costs 30 scans, so sends slow down as the queue grows (about 0.4 s a batch at
   2,000 messages, 0.8 s at 4,000), and 50,000 messages cannot be queued in any useful
   time. Here a send to a standard queue sees no attributes, which is what it read from
   them; FIFO queues are left as they are.

8. `dynamodb-return-old`: moto's UpdateItem and PutItem handlers read the item they will
   return as `UPDATED_OLD` / `ALL_OLD` before, and apart from, the write (the lock of 2
   covers each backend call on its own). Two concurrent `SET n = n + :k` writes both apply
   (n grows by 2k) yet both return the same old n. Real DynamoDB returns the value each
   write replaced; Tern's rate limit takes its slots that way (the TAT before the write
   is where a batch's slots begin), and here two batches were handed the same slots
   (`make bench-rate`: two POSTs 2-6 ms apart at each of them). The handlers run under the
   lock of 2, so the read, the write and the answer are one step.

`TERN_MOTO_STOCK=<name>[,<name>...]` leaves the named fixes out (to compare with stock
moto in tests). Everything else is stock `moto_server`; arguments are passed through.
"""

import copy
import functools
import os
import re
import sys
import threading
import time

from moto.core.exceptions import ServiceException
from moto.core.utils import unix_time
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.responses import DynamoHandler
from moto.dynamodbstreams.models import DynamoDBStreamsBackend
from moto.sqs import responses as sqs_responses
from moto.sqs.models import Queue, SQSBackend
from moto.stepfunctions import models as sfn_models

_STOCK = {name.strip() for name in os.environ.get("TERN_MOTO_STOCK", "").split(",") if name.strip()}
FIXES = (
    "sfn-copy",
    "dynamodb-lock",
    "stream-rollback",
    "sqs-lock",
    "sqs-contents",
    "sqs-retention",
    "sqs-send",
    "dynamodb-return-old",
)
_unknown = _STOCK - set(FIXES)
if _unknown:
    sys.exit(f"TERN_MOTO_STOCK names unknown fixes {sorted(_unknown)}; known: {', '.join(FIXES)}")


def _serialized_by(lock, method):
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with lock:
            return method(*args, **kwargs)

    return wrapper


# 1. sfn-copy


def _deepcopy_without_executions(self, memo):
    cls = self.__class__
    clone = cls.__new__(cls)
    memo[id(self)] = clone
    for key, value in self.__dict__.items():
        setattr(clone, key, [] if key == "executions" else copy.deepcopy(value, memo))
    return clone


if "sfn-copy" not in _STOCK:
    sfn_models.StateMachineInstance.__deepcopy__ = _deepcopy_without_executions

# 3. stream-rollback (wrapped before the lock of 2, so the repair runs under it too)


def _rollback_keeping_stream_shards(method):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        before = dict(self.tables)
        try:
            return method(self, *args, **kwargs)
        finally:
            # moto replaced a table by its pre-transaction copy: move the copy's records
            # into the shard object that iterators reference, and make it the table's.
            for name, table in before.items():
                restored = self.tables.get(name)
                if restored is None or restored is table:
                    continue
                shard = table.stream_shard
                if shard is None or restored.stream_shard is None:
                    continue
                shard.items[:] = restored.stream_shard.items
                shard.table = restored
                restored.stream_shard = shard

    return wrapper


if "stream-rollback" not in _STOCK:
    DynamoDBBackend.transact_write_items = _rollback_keeping_stream_shards(DynamoDBBackend.transact_write_items)

# 2. dynamodb-lock

_dynamodb_lock = threading.RLock()

if "dynamodb-lock" not in _STOCK:
    for _name in ("put_item", "get_item", "update_item", "delete_item", "query", "scan", "transact_write_items"):
        setattr(DynamoDBBackend, _name, _serialized_by(_dynamodb_lock, getattr(DynamoDBBackend, _name)))
    # A stream read must not see records of a transaction that is about to be rolled back.
    for _name in ("describe_stream", "get_shard_iterator", "get_records"):
        setattr(DynamoDBStreamsBackend, _name, _serialized_by(_dynamodb_lock, getattr(DynamoDBStreamsBackend, _name)))

# 8. dynamodb-return-old (the same lock as 2; it is re-entrant, so the backend calls
# inside the handler take it again)

if "dynamodb-return-old" not in _STOCK:
    for _name in ("update_item", "put_item", "delete_item"):
        setattr(DynamoHandler, _name, _serialized_by(_dynamodb_lock, getattr(DynamoHandler, _name)))

# 4. sqs-lock

_sqs_lock = threading.RLock()


def _receive_waiting_unlocked(receive):
    # moto's receive_message long-polls inside itself; holding the lock through that wait
    # would stall every other queue operation. Each attempt here is a non-waiting receive
    # under the lock, and the wait between attempts is on the queue's own condition.
    @functools.wraps(receive)
    def wrapper(self, queue_name, count, wait_seconds_timeout, visibility_timeout, message_attribute_names=None):
        deadline = time.monotonic() + float(wait_seconds_timeout or 0)
        while True:
            with _sqs_lock:
                result = receive(self, queue_name, count, 0, visibility_timeout, message_attribute_names)
                queue = self.get_queue(queue_name)
            remaining = deadline - time.monotonic()
            if result or remaining <= 0:
                return result
            queue.wait_for_messages(min(remaining, 1.0))
            # Visible messages that cannot be received (a FIFO group in flight) end the
            # wait at once; do not spin on them.
            time.sleep(0.01)

    return wrapper


if "sqs-lock" not in _STOCK:
    SQSBackend.receive_message = _receive_waiting_unlocked(SQSBackend.receive_message)
    for _name in (
        "send_message",
        "send_message_batch",
        "delete_message",
        "delete_message_batch",
        "change_message_visibility",
        "change_message_visibility_batch",
        "purge_queue",
        "get_queue_attributes",
    ):
        setattr(SQSBackend, _name, _serialized_by(_sqs_lock, getattr(SQSBackend, _name)))

# 5. sqs-contents

ALLOWED = "#x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF"
_NOT_ALLOWED = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class InvalidMessageContents(ServiceException):
    """What SQS answers for a message with characters outside the allowed set."""

    def __init__(self, message):
        super().__init__("InvalidMessageContents", message)


def contents_error(body, attributes):
    """The InvalidMessageContents text for a body and its message attributes, or None."""
    found = _NOT_ALLOWED.search(body or "")
    if found:
        return (
            f"Invalid binary character '#x{ord(found.group()):X}' was found in the message body, "
            f"the set of allowed characters is {ALLOWED}"
        )
    for name, value in (attributes or {}).items():
        texts = [value.get("StringValue") or ""] + list(value.get("StringListValues") or [])
        for text in texts:
            found = _NOT_ALLOWED.search(text)
            if found:
                return (
                    f"Invalid binary character '#x{ord(found.group()):X}' was found in the value of "
                    f"message attribute '{name}', the set of allowed characters is {ALLOWED}"
                )
    return None


def _checking_send(send):
    @functools.wraps(send)
    def wrapper(self, queue_name, message_body, message_attributes=None, *args, **kwargs):
        error = contents_error(message_body, message_attributes)
        if error:
            raise InvalidMessageContents(error)
        return send(self, queue_name, message_body, message_attributes, *args, **kwargs)

    return wrapper


_refused = threading.local()


def _checking_send_batch(send_batch):
    # Entries with bad contents are taken out before moto sees the batch; the response
    # handler below (same request thread) reports them in `Failed`.
    @functools.wraps(send_batch)
    def wrapper(self, queue_name, entries):
        refused = []
        kept = {}
        for key, entry in entries.items():
            error = contents_error(entry.get("MessageBody"), entry.get("MessageAttributes"))
            if error:
                refused.append({"Id": entry["Id"], "SenderFault": True, "Code": "InvalidMessageContents", "Message": error})
            else:
                kept[key] = entry
        _refused.entries = refused
        return send_batch(self, queue_name, kept)

    return wrapper


def _reporting_refused(handler):
    @functools.wraps(handler)
    def wrapper(self):
        _refused.entries = []
        answer = handler(self)
        answer.result["Failed"].extend(_refused.entries)
        _refused.entries = []
        return answer

    return wrapper


if "sqs-contents" not in _STOCK:
    SQSBackend.send_message = _checking_send(SQSBackend.send_message)
    SQSBackend.send_message_batch = _checking_send_batch(SQSBackend.send_message_batch)
    sqs_responses.SQSResponse.send_message_batch = _reporting_refused(sqs_responses.SQSResponse.send_message_batch)

# 6. sqs-retention


def _within_retention(self, queue_name, message):
    retention_seconds = int(self.get_queue(queue_name).message_retention_period)
    return retention_seconds + message.sent_timestamp / 1000 > unix_time()


if "sqs-retention" not in _STOCK:
    SQSBackend.is_message_valid_based_on_retention_period = _within_retention

# 7. sqs-send

_sending = threading.local()


def _attributes_unread_while_sending(attributes):
    @functools.wraps(attributes.fget)
    def get(self):
        # SendMessage and its validation read only ContentBasedDeduplication, a FIFO
        # attribute: for a standard queue the full computation could only answer "absent".
        if getattr(_sending, "active", False) and not self.fifo_queue:
            return {}
        return attributes.fget(self)

    return property(get)


def _marking_send(send):
    @functools.wraps(send)
    def wrapper(*args, **kwargs):
        _sending.active = True
        try:
            return send(*args, **kwargs)
        finally:
            _sending.active = False

    return wrapper


if "sqs-send" not in _STOCK:
    Queue.attributes = _attributes_unread_while_sending(Queue.attributes)
    SQSBackend.send_message = _marking_send(SQSBackend.send_message)

if __name__ == "__main__":
    from moto.server import main

    sys.exit(main())
