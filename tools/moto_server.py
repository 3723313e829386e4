"""moto server for Tern's local mode and tests, with eleven fixes applied.

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

9. `dynamodb-meter` (opt-in per request): DynamoDB bills by item size (a write unit per
   1 KB of the larger of the item before and after, a read unit per 4 KB, twice in a
   transaction, plus one write per global secondary index entry put or removed), and
   stock moto answers `ReturnConsumedCapacity` with a constant (1 unit per request, no
   index). A DynamoDB request with the header `x-tern-meter: 1` (the scale meter's proxy,
   bench/runner/src/scale/) gets an answer header `x-tern-meter` holding, as JSON, the
   facts billing is computed from: for each item written, its table, partition key, size
   before and after, and each global secondary index entry before and after (partition
   key, size with DynamoDB's 100-byte overhead, whether it changed); for each read, the
   table or index, partition key, items and bytes read (whole stored items, as DynamoDB
   bills, whatever the projection) and whether it was strongly consistent. Requests
   without the header are served as before.

10. `dynamodb-fast-listing`: two costs of moto's `Query` that grow with the table, not with
   the answer. A table query (not an index's) sorts every item of the table, of every partition,
   before keeping the queried partition's: a tenant's endpoints took about 0.5 s to list from a
   table of 10,000 on a loaded machine, so the relay, which lists each tenant of a batch, ran at
   3-5 events a second. And a `Query` or `Scan` answer goes through moto's generic, model-driven
   serializer, about 5 microseconds per attribute value: a page of 700 endpoint items of 17
   attributes took 3.7 s in-process and over 6 s loaded, past the relay's 6 s per-call deadline,
   so a tenant of 5,000 endpoints (the scale meter's fan-out) could not be relayed. Here a table
   query reads only its partition, and both answers are written as DynamoDB JSON directly
   (moto's own `dynamo_json_dump`): the same items, in a fraction of the time.

11. `dynamodb-transaction-undo`: before a TransactWriteItems, moto deep-copies every table
   the transaction names, whole, to put it back if the transaction is cancelled: the cost
   grows with the table, not with the transaction. Every endpoint write is a transaction
   (the tenant's subscriptions version goes with it), so creating the scale meter's 5,000
   endpoints grew quadratically, and a create late in the setup took over the meter's 6 s
   per-call deadline. Here only the items the transaction names are copied (and the length
   of each table's stream), and a cancelled transaction puts back exactly those items and
   drops the stream records it wrote: what DynamoDB guarantees (all or nothing), at the
   cost of the transaction's own items.

`TERN_MOTO_STOCK=<name>[,<name>...]` leaves the named fixes out (to compare with stock
moto in tests). Everything else is stock `moto_server`; arguments are passed through.
"""

import copy
import functools
import json
import os
import re
import sys
import threading
import time

from moto.core.exceptions import ServiceException
from moto.core.responses import ActionResult
from moto.core.utils import unix_time
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table
from moto.dynamodb.models.utilities import dynamo_json_dump
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
    "dynamodb-meter",
    "dynamodb-fast-listing",
    "dynamodb-transaction-undo",
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

# 11. dynamodb-transaction-undo (innermost: the lock of 2 and the repair of 3 wrap it)

_undo = threading.local()
_table_deepcopy = getattr(Table, "__deepcopy__", None)


def _table_copy_unless_in_transaction(self, memo):
    # moto's transact_write_items backs up each table it names with copy.deepcopy; inside
    # _undoing_transaction that backup is the live table itself (putting it back is a no-op)
    # and the wrapper undoes the transaction's own items instead.
    if getattr(_undo, "active", False):
        return self
    if _table_deepcopy is not None:
        return _table_deepcopy(self, memo)
    cls = self.__class__
    clone = cls.__new__(cls)
    memo[id(self)] = clone
    for key, value in self.__dict__.items():
        setattr(clone, key, copy.deepcopy(value, memo))
    return clone


def _transaction_keys(backend, transact_items):
    """(table, hash key, range key) of each item the transaction names, in order, once each."""
    seen = {}
    for entry in transact_items:
        try:
            _, op = next(iter(entry.items()))
            table = backend.get_table(op["TableName"])
            key = op.get("Key")
            if key is None:
                attrs = op["Item"]
                key = {table.hash_key_attr: attrs[table.hash_key_attr]}
                if table.range_key_attr is not None:
                    key[table.range_key_attr] = attrs[table.range_key_attr]
            hash_key, range_key = backend.get_keys_value(table, key)
        except Exception:
            # moto refuses this entry itself (unknown table, missing key): nothing of it is written.
            continue
        seen.setdefault((id(table), hash_key, range_key), (table, hash_key, range_key))
    return list(seen.values())


def _undoing_transaction(method):
    @functools.wraps(method)
    def wrapper(self, transact_items, *args, **kwargs):
        keys = _transaction_keys(self, transact_items)
        saved = [(table, h, r, copy.deepcopy(table.get_item(h, r))) for table, h, r in keys]
        streams = {}
        for table, _, _ in keys:
            if table.stream_shard is not None:
                streams[id(table)] = (table.stream_shard, len(table.stream_shard.items))
        _undo.active = True
        try:
            return method(self, transact_items, *args, **kwargs)
        except Exception:
            for table, h, r, item in saved:
                if r is not None:
                    partition = table.items[h]
                    if item is None:
                        partition.pop(r, None)
                    else:
                        partition[r] = item
                    if not partition:
                        table.items.pop(h, None)
                elif item is None:
                    table.items.pop(h, None)
                else:
                    table.items[h] = item
            for shard, length in streams.values():
                del shard.items[length:]
            raise
        finally:
            _undo.active = False

    return wrapper


if "dynamodb-transaction-undo" not in _STOCK:
    Table.__deepcopy__ = _table_copy_unless_in_transaction
    DynamoDBBackend.transact_write_items = _undoing_transaction(DynamoDBBackend.transact_write_items)

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

# 9. dynamodb-meter (only for requests that ask with `x-tern-meter: 1`)

_meter = threading.local()
# DynamoDB adds 100 bytes to every index entry (Developer Guide, "Provisioned throughput
# considerations for global secondary indexes").
INDEX_ENTRY_OVERHEAD = 100
_READ_OPERATIONS = {"GetItem", "BatchGetItem", "TransactGetItems", "Query", "Scan"}


def _facts():
    return getattr(_meter, "facts", None)


def _index_entries(table, item):
    """Each global secondary index entry `item` has: name -> (partition key, key and
    projection as text, size with the overhead)."""
    entries = {}
    if item is None:
        return entries
    for index in table.global_indexes or []:
        if not all(name in item.attrs for name in index.schema_key_attrs):
            continue
        projected = index.project(item)
        hash_name = next(k["AttributeName"] for k in index.schema if k["KeyType"] == "HASH")
        entries[index.name] = (
            item.attrs[hash_name].to_json(),
            json.dumps(projected.to_json(), sort_keys=True, default=str),
            projected.size() + INDEX_ENTRY_OVERHEAD,
        )
    return entries


def _snapshot(table, item):
    if item is None:
        return None
    return {"size": item.size(), "gsi": _index_entries(table, item)}


def _record_write(facts, table, hash_key, before, after):
    indexes = []
    for name in sorted(set((before or {}).get("gsi", {})) | set((after or {}).get("gsi", {}))):
        old = (before or {}).get("gsi", {}).get(name)
        new = (after or {}).get("gsi", {}).get(name)
        indexes.append(
            {
                "index": name,
                "old_key": old[0] if old else None,
                "old_size": old[2] if old else None,
                "new_key": new[0] if new else None,
                "new_size": new[2] if new else None,
                "changed": old is None or new is None or old[1] != new[1],
            }
        )
    facts["writes"].append(
        {
            "table": table.name,
            "key": hash_key.to_json(),
            "old_size": before["size"] if before else None,
            "new_size": after["size"] if after else None,
            "transaction": bool(getattr(_meter, "transaction", False)),
            "indexes": indexes,
        }
    )


def _put_keys(backend, table, args, kwargs):
    attrs = args[0] if args else kwargs["item_attrs"]
    hash_key = DynamoType(attrs[table.hash_key_attr])
    range_key = DynamoType(attrs[table.range_key_attr]) if table.range_key_attr else None
    return hash_key, range_key


def _key_keys(backend, table, args, kwargs):
    return backend.get_keys_value(table, args[0] if args else kwargs["key"])


def _metered_write(method, keys_of):
    @functools.wraps(method)
    def wrapper(self, table_name, *args, **kwargs):
        facts = _facts()
        if facts is None:
            return method(self, table_name, *args, **kwargs)
        with _dynamodb_lock:
            try:
                table = self.get_table(table_name)
                hash_key, range_key = keys_of(self, table, args, kwargs)
                before = _snapshot(table, table.get_item(hash_key, range_key))
            except Exception:
                return method(self, table_name, *args, **kwargs)
            try:
                result = method(self, table_name, *args, **kwargs)
            except Exception:
                # A refused conditional write is billed by the item it met.
                _record_write(facts, table, hash_key, before, before)
                raise
            _record_write(facts, table, hash_key, before, _snapshot(table, table.get_item(hash_key, range_key)))
            return result

    return wrapper


def _metered_transaction(method):
    @functools.wraps(method)
    def wrapper(self, transact_items, *args, **kwargs):
        facts = _facts()
        if facts is None:
            return method(self, transact_items, *args, **kwargs)
        with _dynamodb_lock:
            _meter.transaction = True
            try:
                # A ConditionCheck writes nothing but is billed as a transactional write of
                # the item it reads.
                for entry in transact_items:
                    check = entry.get("ConditionCheck")
                    if check is None:
                        continue
                    try:
                        table = self.get_table(check["TableName"])
                        hash_key, range_key = self.get_keys_value(table, check["Key"])
                        seen = _snapshot(table, table.get_item(hash_key, range_key))
                        _record_write(facts, table, hash_key, seen, seen)
                    except Exception:
                        pass
                return method(self, transact_items, *args, **kwargs)
            finally:
                _meter.transaction = False

    return wrapper


def _consistent(table_name):
    handler = getattr(_meter, "handler", None)
    body = getattr(handler, "body", None) or {}
    if not isinstance(body, dict):
        return False
    if _meter.operation == "BatchGetItem":
        return bool(body.get("RequestItems", {}).get(table_name, {}).get("ConsistentRead", False))
    return bool(body.get("ConsistentRead", False))


def _record_read(facts, table, index, hash_key, items, byte_count, consistent):
    facts["reads"].append(
        {
            "table": table.name,
            "index": index,
            "key": hash_key,
            "items": items,
            "bytes": byte_count,
            "consistent": consistent,
            "transaction": _meter.operation == "TransactGetItems",
        }
    )


def _metered_get(method):
    @functools.wraps(method)
    def wrapper(self, table_name, keys, *args, **kwargs):
        facts = _facts()
        result = method(self, table_name, keys, *args, **kwargs)
        if facts is None or _meter.operation not in ("GetItem", "BatchGetItem", "TransactGetItems"):
            return result
        try:
            table = self.get_table(table_name)
            hash_key, range_key = self.get_keys_value(table, keys)
            stored = table.get_item(hash_key, range_key)
            size = stored.size() if stored is not None else 0
            _record_read(facts, table, None, hash_key.to_json(), int(stored is not None), size, _consistent(table_name))
        except Exception:
            pass
        return result

    return wrapper


def _stored_sizes(table, index_name, items):
    """Sizes DynamoDB bills for `items` read from `table` (or its index): whole stored
    items, or whole index entries, whatever the projection of the answer."""
    index = None
    if index_name:
        index = next((i for i in (table.global_indexes or []) + (table.indexes or []) if i.name == index_name), None)
    sizes = []
    for item in items:
        stored = table.get_item(item.hash_key, item.range_key) if item.hash_key is not None else None
        stored = stored or item
        sizes.append(index.project(stored).size() + INDEX_ENTRY_OVERHEAD if index else stored.size())
    return sizes


def _metered_listing(method, operation):
    @functools.wraps(method)
    def wrapper(self, table_name, *args, **kwargs):
        facts = _facts()
        result = method(self, table_name, *args, **kwargs)
        if facts is None or _meter.operation != operation:
            return result
        try:
            items, scanned, _ = result
            table = self.get_table(table_name)
            index_name = kwargs.get("index_name")
            sizes = _stored_sizes(table, index_name, items)
            # A filter drops items after they were read and billed: scale to the items
            # scanned.
            byte_count = sum(sizes) * scanned / len(sizes) if sizes else 0
            hash_key = None
            if operation == "Query":
                hash_key = args[0] if args and args[0] else None
                if hash_key is None and kwargs.get("hash_key_conditions"):
                    hash_key = kwargs["hash_key_conditions"][0][1]
            _record_read(facts, table, index_name, hash_key, scanned, int(byte_count), bool(kwargs.get("consistent_read")))
        except Exception:
            pass
        return result

    return wrapper


def _metered_call(call_action):
    @functools.wraps(call_action)
    def wrapper(self):
        if (self.headers.get("x-tern-meter") or "") != "1":
            return call_action(self)
        _meter.facts = {"writes": [], "reads": []}
        _meter.handler = self
        _meter.operation = (self.headers.get("X-Amz-Target") or "").rsplit(".", 1)[-1]
        try:
            status, headers, body = call_action(self)
        finally:
            facts = _meter.facts
            _meter.facts = None
            _meter.handler = None
            _meter.operation = None
        headers["x-tern-meter"] = json.dumps(facts, separators=(",", ":"), default=str)
        return status, headers, body

    return wrapper


if "dynamodb-meter" not in _STOCK:
    DynamoDBBackend.put_item = _metered_write(DynamoDBBackend.put_item, _put_keys)
    DynamoDBBackend.update_item = _metered_write(DynamoDBBackend.update_item, _key_keys)
    DynamoDBBackend.delete_item = _metered_write(DynamoDBBackend.delete_item, _key_keys)
    DynamoDBBackend.transact_write_items = _metered_transaction(DynamoDBBackend.transact_write_items)
    DynamoDBBackend.get_item = _metered_get(DynamoDBBackend.get_item)
    DynamoDBBackend.query = _metered_listing(DynamoDBBackend.query, "Query")
    DynamoDBBackend.scan = _metered_listing(DynamoDBBackend.scan, "Scan")
    DynamoHandler.call_action = _metered_call(DynamoHandler.call_action)

# 10. dynamodb-fast-listing

_partition = threading.local()


def _listing_as_json(handler):
    @functools.wraps(handler)
    def wrapper(self):
        result = handler(self)
        if isinstance(result, ActionResult) and isinstance(result.result, dict):
            return dynamo_json_dump(result.result)
        return result

    return wrapper


def _query_one_partition(query):
    # Table.query(hash_key, range_comparison, range_objs, limit, exclusive_start_key,
    # scan_index_forward, projection_expressions, index_name, ...): a table query (no
    # index) asks all_items() for its candidates, then keeps those of `hash_key`.
    @functools.wraps(query)
    def wrapper(self, hash_key, *args, **kwargs):
        index_name = kwargs.get("index_name", args[6] if len(args) > 6 else None)
        if index_name is not None or hash_key is None:
            return query(self, hash_key, *args, **kwargs)
        _partition.key = hash_key
        try:
            return query(self, hash_key, *args, **kwargs)
        finally:
            _partition.key = None

    return wrapper


def _items_of_partition(all_items):
    @functools.wraps(all_items)
    def wrapper(self):
        key = getattr(_partition, "key", None)
        if key is None:
            return all_items(self)
        found = self.items.get(key)
        if found is None:
            return []
        items = list(found.values()) if self.range_key_attr else [found]
        return sorted(items, key=lambda x: (x.hash_key, x.range_key) if x.range_key else x.hash_key)

    return wrapper


if "dynamodb-fast-listing" not in _STOCK:
    for _name in ("query", "scan"):
        setattr(DynamoHandler, _name, _listing_as_json(getattr(DynamoHandler, _name)))
    Table.query = _query_one_partition(Table.query)
    Table.all_items = _items_of_partition(Table.all_items)

if __name__ == "__main__":
    from moto.server import main

    sys.exit(main())
