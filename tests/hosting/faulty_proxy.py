"""A loopback TCP forwarder that breaks chosen connections at chosen moments: a flaky network between a client and the server.

Each new connection takes the next fault of the plan (then the rest pass untouched):

* :data:`CUT_REQUEST` after ``n`` bytes: the connection is cut while the request is
  still being sent (an upload cut midway; the server sees its body end early);
* :data:`DROP_RESPONSE`: the request arrives whole, the server answers (it has
  committed by then), and the connection is cut before a byte of the answer reaches
  the client.

It records the status line the server answered on each connection, so that a test
can tell a first answer (201) from a repeated one (200).
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass

CUT_REQUEST = "cut-request"
DROP_RESPONSE = "drop-response"


@dataclass(frozen=True)
class Fault:
    """What happens to one connection: ``kind`` (:data:`CUT_REQUEST` or :data:`DROP_RESPONSE`), ``after`` request bytes."""

    kind: str
    after: int = 0


class FaultyProxy:
    """Forwards 127.0.0.1:``port`` to ``target_port``, breaking connections as :meth:`plan` says."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._lock = threading.Lock()
        self._plan: list[Fault] = []
        self.connections = 0
        #: the first status line the server sent on each connection (even one the client never got)
        self.answers: list[str] = []
        #: request bytes forwarded to the server, over every connection since the last plan
        self.forwarded = 0
        #: with :meth:`hold_after`: request bytes past this total (over all connections) wait for :attr:`released`, then the connection is cut
        self.hold_at: int | None = None
        self.holding = threading.Event()
        self.released = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def plan(self, *faults: Fault) -> None:
        """The faults of the next connections, in order; later connections pass."""
        with self._lock:
            self._plan = list(faults)
            self.connections = 0
            self.answers = []
            self.forwarded = 0

    def hold_after(self, total: int) -> None:
        """Forward ``total`` request bytes (over every connection), then hold the rest until :attr:`released` is set, and cut.

        A deterministic "midway": the test sees :attr:`holding`, does what it wants (kill the server), then releases.
        """
        with self._lock:
            self.hold_at, self.forwarded = total, 0
            self.holding.clear()
            self.released.clear()

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                fault = self._plan.pop(0) if self._plan else None
                self.connections += 1
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=30)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            threading.Thread(target=self._requests, args=(client, upstream, fault), daemon=True).start()
            threading.Thread(target=self._answers, args=(upstream, client, fault), daemon=True).start()

    @staticmethod
    def _cut(*sockets: socket.socket) -> None:
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _count(self, size: int) -> None:
        with self._lock:
            self.forwarded += size

    def _requests(self, client: socket.socket, upstream: socket.socket, fault: Fault | None) -> None:
        sent = 0
        try:
            while data := client.recv(65536):
                if self.hold_at is not None and self.forwarded + len(data) >= self.hold_at:
                    with self._lock:
                        first = max(0, self.hold_at - self.forwarded)
                        self.hold_at = None
                        self.forwarded += first
                    upstream.sendall(data[:first])
                    self.holding.set()
                    self.released.wait()
                    self._cut(client, upstream)
                    return
                if fault is not None and fault.kind == CUT_REQUEST and sent + len(data) >= fault.after:
                    upstream.sendall(data[: max(0, fault.after - sent)])
                    self._count(max(0, fault.after - sent))
                    self._cut(client, upstream)
                    return
                upstream.sendall(data)
                self._count(len(data))
                sent += len(data)
        except OSError:
            pass
        try:
            upstream.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _answers(self, upstream: socket.socket, client: socket.socket, fault: Fault | None) -> None:
        first = True
        try:
            while data := upstream.recv(65536):
                if first:
                    with self._lock:
                        self.answers.append(data.split(b"\r\n", 1)[0].decode("latin-1"))
                    first = False
                if fault is not None and fault.kind == DROP_RESPONSE:
                    self._cut(client, upstream)
                    return
                client.sendall(data)
        except OSError:
            pass
        self._cut(client, upstream)
