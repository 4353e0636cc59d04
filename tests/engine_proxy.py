"""A unix-socket forwarder to the Docker engine that a test cuts mid-task: the engine's loss as ``grader run`` sees it,
without stopping the machine's engine (other tests use it)."""

from __future__ import annotations

import re
import socket
import threading
from pathlib import Path

#: A container's start request, as the docker SDK sends it (its id is what a test removes afterwards).
_START = re.compile(rb"POST /v[0-9.]+/containers/([0-9a-f]{64})/start ")


class EngineProxy:
    """Forwards the unix socket ``path`` to the engine's socket ``engine``; :meth:`cut` drops every connection and
    refuses new ones, :meth:`restore` answers again (an engine restarted). Records the ids of the containers it saw
    started, and sets :attr:`started` at the first."""

    def __init__(self, path: Path, engine: Path = Path("/var/run/docker.sock")) -> None:
        self.path, self.engine = path, engine
        self.started = threading.Event()
        self.containers: list[str] = []
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._cut = False
        self._listener = self._listen()

    def _listen(self) -> socket.socket:
        """Bind ``path`` (anew: a cut left the file behind) and accept connections on it from now on."""
        self.path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.path))
        listener.listen(64)
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return listener

    def restore(self) -> None:
        """The engine is back: new connections are forwarded again (those the cut dropped stay dropped)."""
        with self._lock:
            self._cut = False
            self._listener = self._listen()

    @property
    def docker_host(self) -> str:
        """The ``DOCKER_HOST`` that reaches the engine through this proxy."""
        return f"unix://{self.path}"

    def cut(self) -> None:
        """The engine goes away: every connection dropped, none accepted from now on."""
        with self._lock:
            self._cut = True
            for sock in [self._listener, *self._open]:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
            self._open.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            with self._lock:
                if self._cut:
                    client.close()
                    return
                upstream.connect(str(self.engine))
                self._open += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, source: socket.socket, target: socket.socket, requests: bool) -> None:
        try:
            while data := source.recv(65536):
                if requests and (found := _START.search(data)):
                    self.containers.append(found.group(1).decode())
                    self.started.set()
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
