"""moto server for Tern's local mode and tests, with one fix applied.

moto 5.2.x deep-copies a state machine on every StartExecution, including its list of
running executions, whose worker threads hold locks that cannot be copied: a second
execution started while another one waits fails with HTTP 500 ("cannot pickle
'_thread.RLock' object"). Tern starts one execution per long retry wait, many at once,
so the copy here leaves the executions list out (the clone only needs the definition).
Everything else is stock `moto_server`; arguments are passed through.
"""

import copy
import sys

from moto.stepfunctions import models as sfn_models


def _deepcopy_without_executions(self, memo):
    cls = self.__class__
    clone = cls.__new__(cls)
    memo[id(self)] = clone
    for key, value in self.__dict__.items():
        setattr(clone, key, [] if key == "executions" else copy.deepcopy(value, memo))
    return clone


sfn_models.StateMachineInstance.__deepcopy__ = _deepcopy_without_executions

if __name__ == "__main__":
    from moto.server import main

    sys.exit(main())
