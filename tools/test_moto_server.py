"""Stress tests of the moto launcher (tools/moto_server.py): its SQS (fix 4 `sqs-lock`), its
sends (fix 7), DynamoDB's answers to concurrent writes (fix 8 `dynamodb-return-old`), the billing facts of
fix 9 `dynamodb-meter` and the listings of fix 10 `dynamodb-fast-listing`.

Senders, receivers and deleters run at once on one queue, as Tern's local pollers do. Every
message must be received exactly once: none lost, none handed to two receivers while in
flight, none back after its delete. The visibility timeout (300 s) is longer than the
run, so any second receipt of a message is a fault, never a legitimate redelivery.

Run: `.venv/bin/python tools/test_moto_server.py` (part of `make test`). Size: 2 rounds on
fresh queues of 800 messages each, 400 queued before receiving starts (moto's races are
windows that grow with queue length), 4 sender, 4 receiver and 4 deleter threads; 31 s on 2
cores under a load average of 4 to 8. `TERN_MOTO_STOCK=sqs-lock` runs it against stock
moto's SQS: it failed in both runs at this size and both at 3 rounds of 1,000 (1-3 faulty
rounds per run: a message handed to two receivers, lost, or back in the queue after its
delete); without the backlog it found the race in only about half the runs. A race: a run
on stock can be lucky.

`.venv/bin/python tools/test_moto_server.py --bench` prints ReceiveMessage latency by queue
depth (the numbers in docs/local-mode.md).
"""

import json
import os
import queue as queue_module
import socket
import subprocess
import sys
import threading
import time
import unittest
import urllib.request
from pathlib import Path

import boto3
from botocore.config import Config

MESSAGES = 800
# Messages queued before receiving starts.
BACKLOG = 400
# Rounds on fresh queues: most rounds find stock moto's race, not all.
ROUNDS = 2
SENDERS = 4
RECEIVERS = 4
DELETERS = 4
VISIBILITY_SECONDS = 300
# A run that stops making progress for this long has lost messages (seconds).
STALL_SECONDS = 5.0

LAUNCHER = Path(__file__).with_name("moto_server.py")


def start_launcher():
    """Starts tools/moto_server.py on a free 127.0.0.1 port; returns (process, url)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, str(LAUNCHER), "-H", "127.0.0.1", "-p", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{url}/moto-api/", timeout=1):
                return process, url
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"moto launcher did not answer on {url}")
            time.sleep(0.1)


def sqs_client(url):
    return boto3.client(
        "sqs",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": 1}, max_pool_connections=4),
    )


class Ledger:
    """Every receipt and delete, by message body, shared by all threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.receipts = {}  # body -> receipts so far
        self.deleted = set()  # bodies whose delete succeeded
        self.in_flight_twice = []  # bodies received again before their delete finished
        self.back_after_delete = []  # bodies received again after their delete
        self.delete_failures = []
        self.last_progress = time.monotonic()

    def received(self, body):
        with self.lock:
            self.last_progress = time.monotonic()
            count = self.receipts.get(body, 0)
            self.receipts[body] = count + 1
            if count:
                (self.back_after_delete if body in self.deleted else self.in_flight_twice).append(body)

    def delete_done(self, bodies, failed):
        with self.lock:
            self.deleted.update(bodies)
            self.delete_failures.extend(failed)


class ConcurrentQueueTest(unittest.TestCase):
    def setUp(self):
        self.process, self.url = start_launcher()

    def tearDown(self):
        self.process.kill()
        self.process.wait()

    def test_every_message_received_once_with_concurrent_send_receive_delete(self):
        for n in range(ROUNDS):
            with self.subTest(round=n):
                self.round(f"stress{n}")

    def round(self, name):
        client = sqs_client(self.url)
        queue = client.create_queue(
            QueueName=name, Attributes={"VisibilityTimeout": str(VISIBILITY_SECONDS)}
        )["QueueUrl"]
        ledger = Ledger()
        stop = threading.Event()
        errors = []

        def send(first):
            c = sqs_client(self.url)
            try:
                for start in range(first, MESSAGES, 10 * SENDERS):
                    entries = [
                        {"Id": f"e{i}", "MessageBody": f"m{i:05}"} for i in range(start, min(start + 10, MESSAGES))
                    ]
                    answer = c.send_message_batch(QueueUrl=queue, Entries=entries)
                    if answer.get("Failed"):
                        errors.append(f"send failed: {answer['Failed']}")
            except Exception as e:  # noqa: BLE001 - reported as a test failure below
                errors.append(f"sender: {e!r}")

        handles = queue_module.Queue()

        def receive():
            c = sqs_client(self.url)
            try:
                while not stop.is_set():
                    messages = c.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1).get(
                        "Messages", []
                    )
                    for m in messages:
                        ledger.received(m["Body"])
                        handles.put(m)
            except Exception as e:  # noqa: BLE001 - reported as a test failure below
                errors.append(f"receiver: {e!r}")

        def delete():
            # Deleters of their own, one DeleteMessage per message: many deletes overlap
            # with each other, with receives and with sends. (Batch deletes found stock
            # moto's race less often: 1 of 3 runs against 3 of 3.)
            c = sqs_client(self.url)
            try:
                while not (stop.is_set() and handles.empty()):
                    try:
                        m = handles.get(timeout=0.2)
                    except queue_module.Empty:
                        continue
                    c.delete_message(QueueUrl=queue, ReceiptHandle=m["ReceiptHandle"])
                    ledger.delete_done([m["Body"]], [])
            except Exception as e:  # noqa: BLE001 - reported as a test failure below
                errors.append(f"deleter: {e!r}")

        senders = [threading.Thread(target=send, args=(10 * k,)) for k in range(SENDERS)]
        receivers = [threading.Thread(target=receive) for _ in range(RECEIVERS)]
        receivers += [threading.Thread(target=delete) for _ in range(DELETERS)]
        for t in senders:
            t.start()
        # A backlog first: moto's races are windows that grow with the queue's length.
        def depth():
            attributes = client.get_queue_attributes(QueueUrl=queue, AttributeNames=["ApproximateNumberOfMessages"])
            return int(attributes["Attributes"]["ApproximateNumberOfMessages"])

        while depth() < BACKLOG and any(t.is_alive() for t in senders):
            time.sleep(0.05)
        for t in receivers:
            t.start()
        for t in senders:
            t.join()
        # Run until every message was received, or nothing new arrives for STALL_SECONDS;
        # then keep receiving a little longer so a message that comes back is seen.
        while True:
            with ledger.lock:
                done = len(ledger.receipts) >= MESSAGES
                stalled = time.monotonic() - ledger.last_progress > STALL_SECONDS
            if done or stalled:
                break
            time.sleep(0.1)
        time.sleep(2.5)
        stop.set()
        for t in receivers:
            t.join()

        expected = {f"m{i:05}" for i in range(MESSAGES)}
        lost = sorted(expected - set(ledger.receipts))
        self.assertEqual(errors, [])
        self.assertEqual(ledger.delete_failures, [])
        self.assertEqual(lost, [], f"{len(lost)} of {MESSAGES} messages never received")
        self.assertEqual(
            ledger.in_flight_twice, [], f"{len(ledger.in_flight_twice)} messages handed to two receivers in flight"
        )
        self.assertEqual(
            ledger.back_after_delete, [], f"{len(ledger.back_after_delete)} messages came back after their delete"
        )
        attributes = client.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
        left = {k: attributes[k] for k in ("ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible")}
        self.assertEqual(left, dict.fromkeys(left, "0"), "messages still in the queue after every delete succeeded")


class SendWithoutScanTest(unittest.TestCase):
    """Fix 7 `sqs-send`: a send to a standard queue computes no queue attribute, so it does
    not scan the queue (moto's three scans per message made 50,000 messages unqueueable).
    Counted, not timed: each scan of the queue's messages is one call of `Queue.messages`."""

    def test_a_send_batch_scans_nothing_and_a_fifo_queue_still_validates(self):
        sys.path.insert(0, str(LAUNCHER.parent))
        import moto_server  # noqa: F401 - applies the fixes to moto in this process
        from moto import mock_aws
        from moto.sqs.models import Queue

        scans = []
        messages = Queue.messages

        def counting(queue):
            scans.append(1)
            return messages.fget(queue)

        with mock_aws():
            client = boto3.client("sqs", region_name="us-east-1")
            url = client.create_queue(QueueName="standard")["QueueUrl"]
            entries = [{"Id": f"e{i}", "MessageBody": f"m{i}"} for i in range(10)]
            client.send_message_batch(QueueUrl=url, Entries=entries)
            Queue.messages = property(counting)
            try:
                client.send_message_batch(QueueUrl=url, Entries=entries)
                client.send_message(QueueUrl=url, MessageBody="one")
            finally:
                Queue.messages = messages
            # With `TERN_MOTO_STOCK=sqs-send` (stock moto) this counts 11, one a message.
            self.assertEqual(len(scans), 0, "queue scans during 11 sends")
            attributes = client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
            self.assertEqual(attributes["ApproximateNumberOfMessages"], "21")
            # A FIFO queue without content-based deduplication still refuses a message
            # without a deduplication id: its attributes are read as before.
            fifo = client.create_queue(QueueName="q.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
            with self.assertRaises(Exception) as refused:
                client.send_message(QueueUrl=fifo, MessageBody="x", MessageGroupId="g")
            self.assertIn("MessageDeduplicationId", str(refused.exception))


class ConcurrentUpdateReturnsOldTest(unittest.TestCase):
    """Fix 8 `dynamodb-return-old`: concurrent `SET n = n + :one` writes to one item, each
    asking for `UPDATED_OLD`, must each get the value its own write replaced: all
    different, and with the final n, every value from 0 to the last. Tern's rate limit
    reads where its slots begin that way. `TERN_MOTO_STOCK=dynamodb-return-old` runs it
    against stock moto's handler: it failed in each of 4 runs (2 to 19 writers told an
    old value another writer was told too); with the fix it passed 6 of 6."""

    THREADS = 16
    UPDATES = 50  # per thread

    def setUp(self):
        self.process, self.url = start_launcher()

    def tearDown(self):
        self.process.kill()
        self.process.wait()

    def test_each_concurrent_update_gets_the_value_it_replaced(self):
        def client():
            return boto3.client(
                "dynamodb",
                endpoint_url=self.url,
                region_name="us-east-1",
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
                config=Config(retries={"max_attempts": 1}, max_pool_connections=2),
            )

        setup = client()
        setup.create_table(
            TableName="counter",
            KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        # A large item: moto's handler copies it before the write, which widens the race
        # (the health item Tern races on is small; the race is the same).
        padding = {f"p{i}": {"S": "x" * 1000} for i in range(200)}
        setup.put_item(TableName="counter", Item={"k": {"S": "c"}, "n": {"N": "0"}, **padding})
        olds = []
        errors = []
        lock = threading.Lock()

        def work():
            c = client()
            try:
                for _ in range(self.UPDATES):
                    out = c.update_item(
                        TableName="counter",
                        Key={"k": {"S": "c"}},
                        UpdateExpression="SET n = n + :one",
                        ExpressionAttributeValues={":one": {"N": "1"}},
                        ReturnValues="UPDATED_OLD",
                    )
                    with lock:
                        olds.append(int(out["Attributes"]["n"]["N"]))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=work) for _ in range(self.THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        total = self.THREADS * self.UPDATES
        final = int(setup.get_item(TableName="counter", Key={"k": {"S": "c"}})["Item"]["n"]["N"])
        self.assertEqual(final, total, "every update applied")
        repeated = len(olds) - len(set(olds))
        self.assertEqual(repeated, 0, f"{repeated} writers were told an old value another writer was told too")
        self.assertEqual(sorted(olds), list(range(total)))


def metered_dynamodb(url):
    """A DynamoDB client whose requests ask for the meter's facts (fix 9)."""
    client = boto3.client(
        "dynamodb",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": 1}),
    )

    def ask(request, **_):
        request.headers["x-tern-meter"] = "1"

    client.meta.events.register("before-sign.dynamodb.*", ask)
    return client


def facts(answer):
    return json.loads(answer["ResponseMetadata"]["HTTPHeaders"]["x-tern-meter"])


class MeterTest(unittest.TestCase):
    """Fix 9 `dynamodb-meter`: the facts DynamoDB bills by, for requests that ask. Sizes are
    moto's item sizes (attribute names plus values); an index entry adds 100 bytes."""

    @classmethod
    def setUpClass(cls):
        cls.process, cls.url = start_launcher()
        cls.ddb = metered_dynamodb(cls.url)
        cls.ddb.create_table(
            TableName="metered",
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
                {"AttributeName": "ix", "AttributeType": "S"},
            ],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": "byix",
                    "KeySchema": [{"AttributeName": "ix", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "KEYS_ONLY"},
                }
            ],
        )

    @classmethod
    def tearDownClass(cls):
        cls.process.kill()
        cls.process.wait()

    def test_writes_report_sizes_before_and_after_and_index_entries(self):
        put = self.ddb.put_item(TableName="metered", Item={"pk": {"S": "a"}, "sk": {"S": "1"}, "v": {"S": "x" * 2000}})
        (write,) = facts(put)["writes"]
        self.assertEqual(write["table"], "metered")
        self.assertEqual(write["key"], {"S": "a"})
        self.assertIsNone(write["old_size"])
        self.assertGreater(write["new_size"], 2000)
        self.assertEqual(write["indexes"], [])
        self.assertFalse(write["transaction"])
        update = self.ddb.update_item(
            TableName="metered",
            Key={"pk": {"S": "a"}, "sk": {"S": "1"}},
            UpdateExpression="SET ix = :i REMOVE v",
            ExpressionAttributeValues={":i": {"S": "hot"}},
        )
        (write,) = facts(update)["writes"]
        self.assertGreater(write["old_size"], 2000)
        self.assertLess(write["new_size"], 100)
        (entry,) = write["indexes"]
        self.assertEqual((entry["index"], entry["old_key"], entry["new_key"]), ("byix", None, {"S": "hot"}))
        self.assertGreater(entry["new_size"], 100)
        refused = None
        try:
            self.ddb.delete_item(
                TableName="metered",
                Key={"pk": {"S": "a"}, "sk": {"S": "1"}},
                ConditionExpression="attribute_not_exists(pk)",
            )
        except self.ddb.exceptions.ConditionalCheckFailedException as e:
            refused = e.response
        self.assertIsNotNone(refused, "the condition should have failed")
        (write,) = facts(refused)["writes"]
        self.assertEqual(write["old_size"], write["new_size"], "a refused write is billed by the item it met")

    def test_reads_report_whole_items_and_consistency(self):
        self.ddb.put_item(TableName="metered", Item={"pk": {"S": "r"}, "sk": {"S": "1"}, "v": {"S": "y" * 5000}})
        self.ddb.put_item(TableName="metered", Item={"pk": {"S": "r"}, "sk": {"S": "2"}, "v": {"S": "z" * 10}})
        got = self.ddb.get_item(
            TableName="metered", Key={"pk": {"S": "r"}, "sk": {"S": "1"}}, ProjectionExpression="pk", ConsistentRead=True
        )
        (read,) = facts(got)["reads"]
        self.assertEqual((read["key"], read["items"], read["consistent"]), ({"S": "r"}, 1, True))
        self.assertGreater(read["bytes"], 5000, "billed by the whole item, not the projection")
        listed = self.ddb.query(
            TableName="metered", KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "r"}}
        )
        (read,) = facts(listed)["reads"]
        self.assertEqual((read["key"], read["items"], read["consistent"], read["index"]), ({"S": "r"}, 2, False, None))
        missing = self.ddb.get_item(TableName="metered", Key={"pk": {"S": "none"}, "sk": {"S": "1"}})
        (read,) = facts(missing)["reads"]
        self.assertEqual((read["items"], read["bytes"]), (0, 0))

    def test_a_transaction_is_marked_and_plain_requests_carry_nothing(self):
        done = self.ddb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": "metered", "Item": {"pk": {"S": "t"}, "sk": {"S": "1"}}}},
                {"Put": {"TableName": "metered", "Item": {"pk": {"S": "t"}, "sk": {"S": "2"}, "ix": {"S": "i"}}}},
            ]
        )
        writes = facts(done)["writes"]
        self.assertEqual([w["transaction"] for w in writes], [True, True])
        self.assertEqual([len(w["indexes"]) for w in writes], [0, 1])
        plain = boto3.client(
            "dynamodb",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        ).get_item(TableName="metered", Key={"pk": {"S": "t"}, "sk": {"S": "1"}})
        self.assertNotIn("x-tern-meter", plain["ResponseMetadata"]["HTTPHeaders"])


class FastListingTest(unittest.TestCase):
    """Fix 10 `dynamodb-fast-listing`: `Query` and `Scan` answers written as DynamoDB JSON
    directly give the SDK the same items, of every attribute type, and a later page, without
    moto's model-driven serializer (counted: its calls during the listing, none); a table
    query reads its own partition only (counted: the candidates moto considered)."""

    ITEM = {
        "pk": {"S": "p"},
        "sk": {"S": "1"},
        "n": {"N": "12.5"},
        "b": {"B": b"\x00\x01bytes"},
        "t": {"BOOL": True},
        "z": {"NULL": True},
        "l": {"L": [{"S": "a"}, {"N": "1"}, {"M": {"x": {"S": "y"}}}]},
        "m": {"M": {"k": {"L": [{"BOOL": False}]}, "s": {"SS": ["u", "v"]}}},
        "ss": {"SS": ["a", "b"]},
        "ns": {"NS": ["1", "2"]},
        "bs": {"BS": [b"x", b"y"]},
    }

    def test_listings_give_the_same_items_without_the_serializer(self):
        sys.path.insert(0, str(LAUNCHER.parent))
        import moto_server  # noqa: F401 - applies the fixes to moto in this process
        from moto import mock_aws
        from moto.core import responses as core_responses

        from moto.dynamodb.models.table import Table

        calls = []
        original = core_responses.ActionResult.execute_result

        def counting(self, context):
            calls.append(context)
            return original(self, context)

        candidates = []
        all_items = Table.all_items

        def counting_items(self):
            items = all_items(self)
            candidates.append(len(items))
            return items

        with mock_aws():
            core_responses.ActionResult.execute_result = counting
            Table.all_items = counting_items
            try:
                c = boto3.client("dynamodb", region_name="us-east-1")
                c.create_table(
                    TableName="l",
                    BillingMode="PAY_PER_REQUEST",
                    AttributeDefinitions=[
                        {"AttributeName": "pk", "AttributeType": "S"},
                        {"AttributeName": "sk", "AttributeType": "S"},
                    ],
                    KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
                )
                c.put_item(TableName="l", Item=self.ITEM)
                c.put_item(TableName="l", Item={**self.ITEM, "sk": {"S": "2"}})
                for other in range(20):
                    c.put_item(TableName="l", Item={"pk": {"S": f"other{other}"}, "sk": {"S": "1"}})
                calls.clear()
                first = c.query(
                    TableName="l",
                    KeyConditionExpression="pk = :p",
                    ExpressionAttributeValues={":p": {"S": "p"}},
                    Limit=1,
                    ReturnConsumedCapacity="TOTAL",
                )
                second = c.query(
                    TableName="l",
                    KeyConditionExpression="pk = :p",
                    ExpressionAttributeValues={":p": {"S": "p"}},
                    ExclusiveStartKey=first["LastEvaluatedKey"],
                )
                query_candidates = list(candidates)
                scanned = c.scan(TableName="l", FilterExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "p"}})
            finally:
                core_responses.ActionResult.execute_result = original
                Table.all_items = all_items
        self.assertEqual(calls, [], "a listing went through the serializer")
        self.assertEqual(query_candidates, [2, 2], "a query considered other partitions' items")
        self.assertEqual(first["Items"], [self.ITEM])
        self.assertEqual(first["LastEvaluatedKey"], {"pk": {"S": "p"}, "sk": {"S": "1"}})
        self.assertEqual(first["Count"], 1)
        self.assertIn("ConsumedCapacity", first)
        self.assertEqual(second["Items"], [{**self.ITEM, "sk": {"S": "2"}}])
        self.assertEqual(scanned["Items"], [self.ITEM, {**self.ITEM, "sk": {"S": "2"}}])


class TransactionUndoTest(unittest.TestCase):
    """Fix 11 `dynamodb-transaction-undo`: a transaction copies only the items it names, and
    a cancelled one puts back exactly those (and writes nothing to the stream). Counted, not
    timed: stock moto backs up each named table by a deep copy and, when the transaction is
    cancelled, puts the copy in the table's place (`TERN_MOTO_STOCK=dynamodb-transaction-undo`
    fails the identity check below)."""

    def test_a_cancelled_transaction_undoes_its_own_items_in_the_same_table(self):
        sys.path.insert(0, str(LAUNCHER.parent))
        import moto_server  # noqa: F401 - applies the fixes to moto in this process
        from moto import mock_aws
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.dynamodb.models import dynamodb_backends

        with mock_aws():
            c = boto3.client("dynamodb", region_name="us-east-1")
            c.create_table(
                TableName="t",
                BillingMode="PAY_PER_REQUEST",
                AttributeDefinitions=[
                    {"AttributeName": "pk", "AttributeType": "S"},
                    {"AttributeName": "sk", "AttributeType": "S"},
                ],
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
                StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
            )
            for n in range(30):
                c.put_item(TableName="t", Item={"pk": {"S": f"p{n % 3}"}, "sk": {"S": str(n)}, "v": {"N": "1"}})
            backend = dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
            table = backend.tables["t"]
            records_before = len(table.stream_shard.items)

            cancelled = [
                {"Put": {"TableName": "t", "Item": {"pk": {"S": "new"}, "sk": {"S": "1"}}}},
                {
                    "Update": {
                        "TableName": "t",
                        "Key": {"pk": {"S": "p0"}, "sk": {"S": "0"}},
                        "UpdateExpression": "SET v = :two",
                        "ExpressionAttributeValues": {":two": {"N": "2"}},
                    }
                },
                {"Delete": {"TableName": "t", "Key": {"pk": {"S": "p1"}, "sk": {"S": "1"}}}},
                {
                    "ConditionCheck": {
                        "TableName": "t",
                        "Key": {"pk": {"S": "p2"}, "sk": {"S": "2"}},
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
            ]
            with self.assertRaises(c.exceptions.TransactionCanceledException):
                c.transact_write_items(TransactItems=cancelled)
            self.assertIs(backend.tables["t"], table, "the table was replaced by a copy")
            self.assertNotIn("Item", c.get_item(TableName="t", Key={"pk": {"S": "new"}, "sk": {"S": "1"}}))
            kept = c.get_item(TableName="t", Key={"pk": {"S": "p0"}, "sk": {"S": "0"}})["Item"]
            self.assertEqual(kept["v"], {"N": "1"})
            self.assertIn("Item", c.get_item(TableName="t", Key={"pk": {"S": "p1"}, "sk": {"S": "1"}}))
            self.assertEqual(len(table.stream_shard.items), records_before, "a cancelled transaction wrote stream records")
            self.assertEqual(c.scan(TableName="t")["Count"], 30)

            # A duplicate key is refused before anything is kept.
            with self.assertRaises(Exception):
                c.transact_write_items(TransactItems=[cancelled[1], cancelled[1]])
            self.assertEqual(c.get_item(TableName="t", Key={"pk": {"S": "p0"}, "sk": {"S": "0"}})["Item"]["v"], {"N": "1"})

            # The same writes without the failing check apply, each once, with their records.
            c.transact_write_items(TransactItems=cancelled[:3])
            self.assertIn("Item", c.get_item(TableName="t", Key={"pk": {"S": "new"}, "sk": {"S": "1"}}))
            self.assertEqual(c.get_item(TableName="t", Key={"pk": {"S": "p0"}, "sk": {"S": "0"}})["Item"]["v"], {"N": "2"})
            self.assertNotIn("Item", c.get_item(TableName="t", Key={"pk": {"S": "p1"}, "sk": {"S": "1"}}))
            self.assertEqual(len(table.stream_shard.items), records_before + 3)


def bench():
    """Median latency of ReceiveMessage (10 messages, then released) and SendMessageBatch
    (10 messages) by queue depth, in milliseconds."""
    process, url = start_launcher()
    try:
        client = sqs_client(url)
        for depth in (250, 1_000):
            queue = client.create_queue(QueueName=f"bench{depth}")["QueueUrl"]
            sends = []
            for start in range(0, depth, 10):
                began = time.perf_counter()
                client.send_message_batch(
                    QueueUrl=queue, Entries=[{"Id": f"e{i}", "MessageBody": "x" * 1_000} for i in range(10)]
                )
                sends.append((time.perf_counter() - began) * 1000)
            receives = []
            for _ in range(10):
                began = time.perf_counter()
                messages = client.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, VisibilityTimeout=600)[
                    "Messages"
                ]
                receives.append((time.perf_counter() - began) * 1000)
                client.change_message_visibility_batch(
                    QueueUrl=queue,
                    Entries=[
                        {"Id": f"v{i}", "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
                        for i, m in enumerate(messages)
                    ],
                )
            receives.sort()
            last_sends = sorted(sends[-10:])
            print(
                f"depth {depth:>5}: ReceiveMessage(10) median {receives[len(receives) // 2]:.0f} ms, "
                f"SendMessageBatch(10) at that depth median {last_sends[len(last_sends) // 2]:.0f} ms"
            )
    finally:
        process.kill()
        process.wait()


if __name__ == "__main__":
    os.environ.setdefault("NO_PROXY", "127.0.0.1")
    if "--bench" in sys.argv:
        bench()
    else:
        unittest.main()
