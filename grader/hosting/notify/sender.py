"""The sender: a thread of the server that delivers the outbox's due rows, with backoff, bounded in tries and age.

Grading never waits on it: an event only adds rows in its own transaction (:mod:`grader.hosting.notify.outbox`);
this thread reads them, tries each on a few threads of its own (so one slow receiver does not hold the others), and
records how each try went. A try is bounded (``[notify] timeout_s``); a delivery is given up after ``attempts`` tries
or once ``max_age_s`` have passed since its event. What is logged names the delivery, its channel and why it failed,
never a secret, a body, or a URL's path and query (where a participant's own token may sit).
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from grader import jsonio
from grader.hosting.clock import utcnow
from grader.hosting.config import NotifyPolicy
from grader.hosting.db.session import Database
from grader.hosting.errors import DeliveryFailed
from grader.hosting.notify import mail, outbox, webhook
from grader.hosting.notify.addresses import Guard

log = logging.getLogger("grader.hosting.notify")

#: Deliveries taken per pass, and tried at once.
BATCH = 16
PARALLEL = 4
#: How often the sender looks for due rows (an event's notification leaves within about this).
POLL_S = 0.5
#: Ended deliveries are kept this long (what `grader notify show` lists), then removed, once an hour.
KEEP_ENDED = timedelta(days=7)
PRUNE_EVERY_S = 3600.0
#: The longest pause between passes while they fail (a database that is down).
FAILING_POLL_S = 30.0


def _first_line(error: BaseException) -> str:
    """An error's kind and the first line of its words (a database error's words run to many lines)."""
    words = str(error).strip().splitlines()
    return f"{type(error).__name__}: {words[0] if words else ''}"


def body(competition: str, facts: dict[str, object]) -> bytes:
    """A webhook's body: the event's facts and the competition, canonical JSON (sorted keys, UTF-8)."""
    return jsonio.dumps({**facts, "competition": competition}, sort_keys=True).encode()


class Sender(threading.Thread):
    """Delivers one competition's notifications until :meth:`stop`; started and stopped with the server's reaper."""

    def __init__(self, db: Database, competition: str, policy: NotifyPolicy, *, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(name="grader-notify", daemon=True)
        self.db, self.competition, self.policy, self.tls = db, competition, policy, tls
        self.guard = Guard.of(policy.allow_networks, policy.resolve)
        self.stopping = threading.Event()

    def run(self) -> None:
        next_prune = 0.0
        pause = POLL_S
        failing = False
        with ThreadPoolExecutor(PARALLEL, thread_name_prefix="grader-notify-try") as tries:
            while not self.stopping.wait(pause):
                try:
                    if time.monotonic() >= next_prune:
                        next_prune = time.monotonic() + PRUNE_EVERY_S
                        self.prune()
                    list(tries.map(self.deliver, self.take()))
                except Exception as error:  # the sender must outlive a database outage; the rows wait in the outbox
                    # One line when the trouble starts, not a traceback every half second while it lasts; the pause
                    # doubles up to FAILING_POLL_S so a database that is down is not hammered.
                    if not failing:
                        log.warning("notify: a pass of the sender failed (%s); retrying", _first_line(error))
                    failing, pause = True, min(FAILING_POLL_S, pause * 2)
                else:
                    if failing:
                        log.warning("notify: the sender's passes succeed again")
                    failing, pause = False, POLL_S

    def stop(self) -> None:
        self.stopping.set()

    def prune(self) -> int:
        """Remove the deliveries that ended more than :data:`KEEP_ENDED` ago."""
        with self.db.session() as session:
            return outbox.prune(session, utcnow() - KEEP_ENDED)

    def take(self) -> list[outbox.Pending]:
        """The due deliveries, each taken for one try (held past the try's bound, so no other sender takes it meanwhile)."""
        with self.db.session() as session:
            return outbox.take_due(session, utcnow(), BATCH, hold_s=4 * self.policy.timeout_s + 10)

    def deliver(self, pending: outbox.Pending) -> None:
        """One try of ``pending``; its outcome recorded: delivered, due again after the backoff, or given up."""
        now = utcnow()
        deadline = pending.created_at + timedelta(seconds=self.policy.max_age_s)
        try:
            if now > deadline:
                raise DeliveryFailed(f"older than [notify] max_age_s ({self.policy.max_age_s:g} s)")
            self._try(pending)
        except DeliveryFailed as error:
            retry_at = utcnow() + timedelta(seconds=self.policy.backoff(pending.tries))
            with self.db.session() as session:
                if pending.tries >= self.policy.attempts or retry_at > deadline:
                    outbox.end(session, pending.id, f"given up after {pending.tries} tries: {error}")
                    log.warning("notify: delivery %d (%s) given up after %d tries: %s", pending.id, pending.channel, pending.tries, error)
                else:
                    outbox.again_at(session, pending.id, retry_at, f"try {pending.tries} failed: {error}")
                    log.info("notify: delivery %d (%s) try %d failed: %s", pending.id, pending.channel, pending.tries, error)
            return
        with self.db.session() as session:
            outbox.end(session, pending.id, "delivered")

    def _try(self, pending: outbox.Pending) -> None:
        if pending.channel == outbox.WEBHOOK:
            if pending.secret is None:
                raise DeliveryFailed("the webhook has no secret (cleared)")
            webhook.post(
                pending.address,
                pending.secret,
                body(self.competition, pending.facts),
                guard=self.guard,
                timeout_s=self.policy.timeout_s,
                tls=self.tls,
            )
        else:
            mail.send(self.policy, mail.message(self.policy, pending.address, self.competition, pending.facts), tls=self.tls)
