"""moto server for Tern's local mode and tests, with two fixes applied.

1. moto 5.2.x deep-copies a state machine on every StartExecution, including its list of
   running executions, whose worker threads hold locks that cannot be copied: a second
   execution started while another one waits fails with HTTP 500 ("cannot pickle
   '_thread.RLock' object"). Tern starts one execution per long retry wait, many at once,
   so the copy here leaves the executions list out (the clone only needs the definition).
2. moto serves requests on several threads and does not lock its DynamoDB tables, so two
   concurrent conditional writes to one item can both pass their condition. Real DynamoDB
   applies a conditional write atomically, and Tern's no-double-POST claim relies on that;
   here every DynamoDB item operation runs under one lock, which restores the guarantee.

Everything else is stock `moto_server`; arguments are passed through.
"""

import copy
import functools
import sys
import threading

from moto.dynamodb.models import DynamoDBBackend
from moto.stepfunctions import models as sfn_models


def _deepcopy_without_executions(self, memo):
    cls = self.__class__
    clone = cls.__new__(cls)
    memo[id(self)] = clone
    for key, value in self.__dict__.items():
        setattr(clone, key, [] if key == "executions" else copy.deepcopy(value, memo))
    return clone


sfn_models.StateMachineInstance.__deepcopy__ = _deepcopy_without_executions

_dynamodb_lock = threading.RLock()


def _serialized(method):
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with _dynamodb_lock:
            return method(*args, **kwargs)

    return wrapper


for _name in ("put_item", "get_item", "update_item", "delete_item", "query", "scan", "transact_write_items"):
    setattr(DynamoDBBackend, _name, _serialized(getattr(DynamoDBBackend, _name)))

if __name__ == "__main__":
    from moto.server import main

    sys.exit(main())
