"""The control channel of a running `tieredlog dev-cluster`: `stop`, `kill`, `start`, `restart` one
broker and `status`, sent by another `tieredlog dev-cluster` process.

The supervisor listens on 127.0.0.1 on a port of its own choosing and writes the port, its pid and a
random token to DIR/dev-cluster.control (mode 0600, removed when it stops). A command is one JSON line
``{"token": ..., "command": "kill", "broker": 2}``; the answer one JSON line ``{"ok": true,
"message": "..."}``, sent once the command is done. A TCP port rather than a Unix socket: a socket
path under a deep DIR can exceed the 108 bytes Linux allows; the token keeps other local users out.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import socket
import socketserver
import threading
from pathlib import Path
from typing import Callable

HOST = "127.0.0.1"
CONTROL_FILE = "dev-cluster.control"
COMMANDS = ("status", "start", "stop", "kill", "restart")
MAX_REQUEST_BYTES = 4096
# A start waits for the broker's registration, which after a kill -9 waits for the dead session's
# znode to expire; a stop waits for the controlled shutdown.
CLIENT_TIMEOUT_S = 240.0

# command, broker id or None -> (ok, message)
Handler = Callable[[str, "int | None"], "tuple[bool, str]"]


class ControlError(Exception):
    """The command could not be delivered; the message says why."""


class ControlServer:
    def __init__(self, base: Path, handle: Handler) -> None:
        self.path = base / CONTROL_FILE
        self.token = secrets.token_hex(16)
        token = self.token

        class RequestHandler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                line = self.rfile.readline(MAX_REQUEST_BYTES)
                try:
                    request = json.loads(line)
                    if not hmac.compare_digest(str(request.get("token", "")), token):
                        ok, message = False, "bad token"
                    else:
                        ok, message = _dispatch(handle, request)
                except (ValueError, AttributeError):
                    ok, message = False, "malformed request"
                try:
                    self.wfile.write(json.dumps({"ok": ok, "message": message}).encode() + b"\n")
                except OSError:
                    pass  # the client gave up waiting

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server((HOST, 0), RequestHandler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="dev-cluster-control", daemon=True)

    def start(self) -> None:
        self._thread.start()
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"pid": os.getpid(), "port": self.port, "token": self.token}, f)
        os.replace(tmp, self.path)

    def close(self) -> None:
        try:
            if json.loads(self.path.read_text()).get("token") == self.token:
                self.path.unlink()
        except (OSError, ValueError):
            pass
        self._server.shutdown()
        self._server.server_close()


def _dispatch(handle: Handler, request: dict[str, object]) -> tuple[bool, str]:
    command, broker = request.get("command"), request.get("broker")
    if command not in COMMANDS:
        return False, f"unknown command {command!r}"
    if broker is not None and not isinstance(broker, int):
        return False, f"--broker must be a broker id, got {broker!r}"
    return handle(str(command), broker)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running_supervisor(base: Path) -> int | None:
    """The pid of the dev-cluster that serves DIR's control file, if one is alive and answers."""
    try:
        info = json.loads((base / CONTROL_FILE).read_text())
        pid, port = int(info["pid"]), int(info["port"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not _pid_alive(pid):
        return None
    try:
        with socket.create_connection((HOST, port), timeout=2):
            return pid
    except OSError:
        return None


def send(base: Path, command: str, broker: int | None, timeout: float = CLIENT_TIMEOUT_S) -> tuple[bool, str]:
    """Send one command to the dev-cluster running on ``base``; (ok, message) of its answer."""
    path = base / CONTROL_FILE
    try:
        info = json.loads(path.read_text())
        pid, port, token = int(info["pid"]), int(info["port"]), str(info["token"])
    except FileNotFoundError:
        raise ControlError(f"no dev-cluster is running on {base} (no {path})") from None
    except PermissionError:
        raise ControlError(f"cannot read {path}: it belongs to the user who started the cluster") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ControlError(f"{path} is unreadable ({exc}); is a dev-cluster running on {base}?") from None
    try:
        with socket.create_connection((HOST, port), timeout=5) as s:
            s.settimeout(timeout)
            s.sendall(json.dumps({"token": token, "command": command, "broker": broker}).encode() + b"\n")
            with s.makefile("rb") as f:
                line = f.readline()
    except ConnectionRefusedError:
        state = "running" if _pid_alive(pid) else "gone"
        raise ControlError(f"no dev-cluster answers on {base} (its pid {pid} is {state}; "
                           f"{path} is left from an earlier run)") from None
    except socket.timeout:
        raise ControlError(f"the dev-cluster on {base} did not answer within {timeout:.0f} s") from None
    except OSError as exc:
        raise ControlError(f"cannot reach the dev-cluster on {base}: {exc}") from None
    try:
        answer = json.loads(line)
        return bool(answer["ok"]), str(answer["message"])
    except (ValueError, KeyError, TypeError):
        raise ControlError(f"the dev-cluster on {base} closed the connection without an answer") from None
