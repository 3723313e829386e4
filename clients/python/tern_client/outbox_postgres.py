"""The outbox on PostgreSQL: the event's row inserted in your own psycopg 3 transaction,
beside your business change, so both commit or neither does (docs/outbox.md,
"PostgreSQL outbox"). The event is the one :meth:`OutboxWriter.prepare` validates, as for
DynamoDB (the same limits, codes and vectors); only the storage differs. The table is
created by shared/tern-outbox/migrations/postgres/*.sql; the PostgreSQL relay publishes
its rows::

    import psycopg
    from tern_client import OutboxWriter
    from tern_client.outbox_postgres import TABLE, insert

    writer = OutboxWriter(TABLE)
    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute("UPDATE orders SET status = 'paid' WHERE id = %s", ("o_1",))
        event = writer.prepare(type="order.paid", tenant_id="tnt_acme",
                               payload='{"order_id":"o_1","amount":4200}')
        insert(conn, event)

With SQLAlchemy, :func:`insert_in_session` puts the row in your ``Session``'s
transaction (any PostgreSQL driver)::

    with Session(engine) as session, session.begin():
        session.add(order)
        insert_in_session(session, writer.prepare(...))

Neither psycopg nor SQLAlchemy is imported by this module until you call it:
``pip install tern-client[postgres]``.
"""

from __future__ import annotations

from typing import Any

from .outbox import PreparedEvent

#: The outbox table's name, as the migrations create it (fixed: no statement is built
#: from a configurable name).
TABLE = "tern_outbox"

#: The insert of one event's row; the column list is the migration's.
INSERT = (
    "INSERT INTO tern_outbox "
    "(tenant_id, event_id, event_type, created_at, payload, traceparent, tracestate) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING seq"
)

#: :data:`INSERT` with named parameters, for SQLAlchemy's ``text()``.
INSERT_NAMED = (
    "INSERT INTO tern_outbox "
    "(tenant_id, event_id, event_type, created_at, payload, traceparent, tracestate) "
    "VALUES (:tenant_id, :event_id, :event_type, :created_at, :payload, :traceparent, "
    ":tracestate) RETURNING seq"
)

#: PostgreSQL's SQLSTATE for a unique violation (Appendix A, class 23).
_UNIQUE_VIOLATION = "23505"


class DuplicateEvent(Exception):
    """The event's tenant already has an event with this id (the table's
    ``UNIQUE (tenant_id, event_id)``): your transaction is aborted, as a DynamoDB
    transaction is cancelled by the outbox item's condition. Another tenant's event with
    the same id is another event."""

    def __init__(self, tenant_id: str, event_id: str) -> None:
        super().__init__(f"tenant {tenant_id} already has an event with id {event_id}")
        self.tenant_id = tenant_id
        self.event_id = event_id


def insert(conn: Any, event: PreparedEvent) -> int:
    """Inserts ``event``'s row through ``conn``, a psycopg 3 ``Connection`` or ``Cursor``
    inside your transaction (``with conn.transaction():``), and returns its ``seq`` (the
    relay's order). The payload goes in as ``text``, byte for byte; ``created_at`` to the
    millisecond, as in the DynamoDB item.

    :raises DuplicateEvent: the tenant already has this event id (roll back)
    """
    params = _values(event)
    try:
        row = conn.execute(INSERT, params).fetchone()
    except Exception as e:
        if _is_unique_violation(e):
            raise DuplicateEvent(event.tenant_id, event.id) from e
        raise
    return int(row[0])


def insert_in_session(session: Any, event: PreparedEvent) -> int:
    """Inserts ``event``'s row through a SQLAlchemy ``Session`` (or ``Connection``), in
    its current transaction, and returns its ``seq``; as :func:`insert` otherwise.

    :raises DuplicateEvent: the tenant already has this event id (roll back)
    """
    from sqlalchemy import text

    names = (
        "tenant_id",
        "event_id",
        "event_type",
        "created_at",
        "payload",
        "traceparent",
        "tracestate",
    )
    params = dict(zip(names, _values(event), strict=True))
    try:
        return int(session.execute(text(INSERT_NAMED), params).scalar_one())
    except Exception as e:
        # SQLAlchemy wraps the driver's error in ``orig``.
        if _is_unique_violation(e) or _is_unique_violation(getattr(e, "orig", None)):
            raise DuplicateEvent(event.tenant_id, event.id) from e
        raise


def _is_unique_violation(e: object) -> bool:
    # psycopg 3: ``sqlstate``; psycopg2: ``pgcode``.
    return _UNIQUE_VIOLATION in (
        getattr(e, "sqlstate", None),
        getattr(e, "pgcode", None),
    )


def _values(event: PreparedEvent) -> tuple[Any, ...]:
    return (
        event.tenant_id,
        event.id,
        event.type,
        event.created_at,
        event.payload,
        event.traceparent,
        event.tracestate,
    )
