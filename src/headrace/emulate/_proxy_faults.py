"""The proxy's fault rules: which requests fail, how, and what an injected error says.

A :class:`FaultRule` matches requests whose request line contains ``match`` and
fires on every ``every``-th of them (or on a seeded random ``fraction``), at
most ``limit`` times; :class:`RuleState` is one rule's count in a running proxy.
An injected status is answered as S3 would answer it (:func:`error_body`), so a
client's error mapping sees what a real store sends.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal

from headrace.errors import ConfigError

__all__ = ["SLOW_DOWN", "FaultKind", "FaultRule", "RuleState", "error_body"]

FaultKind = Literal["status", "drop", "truncate", "short", "stall"]

_REASONS = {
    # The 400 a GET meets mid-run: the session's temporary credentials ran out.
    400: ("Bad Request", "ExpiredToken", "The provided token has expired."),
    403: ("Forbidden", "AccessDenied", "Access Denied"),
    404: ("Not Found", "NoSuchKey", "The specified key does not exist."),
    429: ("Too Many Requests", "SlowDown", "Please reduce your request rate."),
    500: ("Internal Server Error", "InternalError", "We encountered an internal error."),
    503: ("Service Unavailable", "SlowDown", "Please reduce your request rate."),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class FaultRule:
    """Which requests fail, and how.

    ``kind``: ``"status"`` answers ``status`` with an S3-style XML error body;
    ``"drop"`` closes the connection without an answer; ``"truncate"`` sends
    the upstream headers (full ``Content-Length``) but only half the body,
    then closes; ``"short"`` sends half the body with a ``Content-Length`` that
    matches it (a server that lies consistently); ``"stall"`` sends nothing
    for ``stall_s`` seconds, then closes.
    """

    kind: FaultKind = "status"
    status: int = 503
    match: str = ""
    every: int = 1
    fraction: float | None = None
    limit: int | None = None
    stall_s: float = 30.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("status", "drop", "truncate", "short", "stall"):
            raise ConfigError(
                f"Fault kind must be status, drop, truncate, short or stall (got {self.kind!r})."
            )
        # Integers: every=2.5 fired on each 5th match (seen % 2.5 == 0), limit=1.5 twice.
        if isinstance(self.every, bool) or not isinstance(self.every, int):
            raise ConfigError(f"Fault 'every' must be an integer >= 1 (got {self.every}).")
        if self.every < 1:
            raise ConfigError(f"Fault 'every' must be >= 1 (got {self.every}).")
        if self.fraction is not None and not 0.0 <= self.fraction <= 1.0:
            raise ConfigError(f"Fault fraction must be in [0, 1] (got {self.fraction}).")
        if self.limit is not None and (
            isinstance(self.limit, bool) or not isinstance(self.limit, int)
        ):
            raise ConfigError(f"Fault limit must be an integer >= 0 or None (got {self.limit}).")
        if self.limit is not None and self.limit < 0:
            raise ConfigError(f"Fault limit must be >= 0 (got {self.limit}).")
        # A negative or NaN stall_s did not stall at all: the connection closed at once.
        if not 0 <= self.stall_s < math.inf:
            raise ConfigError(
                f"Fault stall_s must be a finite number >= 0 (got {self.stall_s}); "
                "give more seconds than the client's timeout."
            )
        if not 100 <= self.status <= 599:
            raise ConfigError(f"Fault status must be an HTTP status (got {self.status}).")


SLOW_DOWN = FaultRule(kind="status", status=503)


class RuleState:
    """One rule's count of the requests it saw and fired on."""

    __slots__ = ("fired", "rng", "rule", "seen")

    def __init__(self, rule: FaultRule) -> None:
        self.rule = rule
        self.seen = 0
        self.fired = 0
        self.rng = random.Random(rule.seed)

    def fires(self, request_line: str) -> bool:
        rule = self.rule
        if rule.match not in request_line:
            return False
        self.seen += 1
        if rule.limit is not None and self.fired >= rule.limit:
            return False
        if rule.fraction is not None:
            hit = self.rng.random() < rule.fraction
        else:
            hit = self.seen % rule.every == 0
        if hit:
            self.fired += 1
        return hit


def error_body(status: int) -> tuple[str, bytes]:
    """The reason phrase and S3-style XML error body of an injected ``status``."""
    reason, code, message = _REASONS.get(status, ("Error", "InternalError", "Error"))
    payload = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
        f"<Message>{message}</Message></Error>"
    ).encode()
    return reason, payload
