"""Is this store answering? One question per kind of store, asked the same way of every server.

A local server and a container server of the same store are ready by the same
test: a real request through the address clients will use (``url``), not an
open port — Postgres accepts connections before it can run a query, and a
container's published port listens before the store inside does. Each answers
False (never raises) on the store's own errors, within a timeout of a second or two,
so a caller can poll it against its own deadline.

The clients are imported here, when asked: each store is an optional extra, and
a Redis-only install must work.
"""

from __future__ import annotations


def redis_answers(url: str, timeout_s: float = 1.0) -> bool:
    """Does the Redis at ``url`` answer PING?"""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def postgres_answers(url: str, timeout_s: int = 2) -> bool:
    """Does the Postgres at ``url`` run ``SELECT 1``? (libpq's connect timeout counts whole seconds)"""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=timeout_s, autocommit=True) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False
