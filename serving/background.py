"""A real uvicorn server on a loopback port in a background thread (integration tests, benchmarks, demos).

    with BackgroundServer(create_app(server)) as url:
        httpx.get(url + "/healthz")

The socket is bound before the thread starts (port 0 = a free one), so there is no race for the port,
and ``__enter__`` returns only once the server accepts requests. ``__exit__`` asks it to stop and waits.
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType

import uvicorn
from fastapi import FastAPI


class BackgroundServer:
    """uvicorn serving ``app`` on ``host:port`` from a daemon thread; a context manager yielding the base URL."""

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0, *, start_timeout_s: float = 30.0) -> None:
        self.app, self.host, self.port, self.start_timeout_s = app, host, port, start_timeout_s
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> str:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((self.host, self.port))
        self.port = self._sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name=f"uvicorn:{self.port}", daemon=True)
        self._thread.start()
        end = time.monotonic() + self.start_timeout_s
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"uvicorn on {self.url} exited during startup")
            if time.monotonic() > end:
                self.stop()
                raise RuntimeError(f"uvicorn on {self.url} did not start within {self.start_timeout_s} s")
            time.sleep(0.02)
        return self.url

    def stop(self, timeout_s: float = 15.0) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self._sock is not None:
            self._sock.close()
        self._server = self._thread = self._sock = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
