"""A local stand-in for the chat services' robot endpoints: it checks each request as the service does (the
signature by the service's documented rule, computed here independently of msmon) and answers as the service
answers, a refusal included. ``hang=True``: it never answers."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OK = {"feishu": {"code": 0, "msg": "success"}, "dingtalk": {"errcode": 0, "errmsg": "ok"},
      "wecom": {"errcode": 0, "errmsg": "ok"}}
BAD_SIGN = {"feishu": {"code": 19021, "msg": "sign match fail or timestamp is not within one hour"},
            "dingtalk": {"errcode": 310000, "errmsg": "sign not match"}}


def feishu_signed(body: dict[str, Any], secret: str) -> bool:
    timestamp = body.get("timestamp", "")
    expected = base64.b64encode(hmac.new(f"{timestamp}\n{secret}".encode(), b"", hashlib.sha256).digest()).decode()
    return body.get("sign") == expected and abs(time.time() - int(timestamp or 0)) < 3600


def dingtalk_signed(query: dict[str, list[str]], secret: str) -> bool:
    timestamp = (query.get("timestamp") or [""])[0]
    digest = hmac.new(secret.encode(), f"{timestamp}\n{secret}".encode(), hashlib.sha256).digest()
    return (query.get("sign") or [""])[0] == base64.b64encode(digest).decode() and \
        abs(time.time() * 1000 - int(timestamp or 0)) < 3_600_000


class RobotServer:
    """``url(service)`` for each service on one local server; ``received[service]``: (query, body) of every
    message it accepted; ``refused``: how many it refused."""

    def __init__(self, secrets: dict[str, str] | None = None, hang: bool = False) -> None:
        self.secrets = secrets or {}
        self.received: dict[str, list[tuple[dict[str, list[str]], Any]]] = {}
        self.refused = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                parsed = urllib.parse.urlparse(self.path)
                service = parsed.path.strip("/").split("/")[0]
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if hang:
                    time.sleep(60)
                    return
                query = urllib.parse.parse_qs(parsed.query)
                secret = server.secrets.get(service)
                signed = secret is None or (feishu_signed(body, secret) if service == "feishu"
                                            else dingtalk_signed(query, secret))
                if signed:
                    server.received.setdefault(service, []).append((query, body))
                else:
                    server.refused += 1
                answer = (OK if signed else BAD_SIGN).get(service)
                data = b"ok" if answer is None else json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain" if answer is None else "application/json")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False  # a hanging handler must not hold the test up
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, service: str) -> str:
        query = "?access_token=t0ken" if service == "dingtalk" else "?key=k3y" if service == "wecom" else ""
        return f"http://127.0.0.1:{self.server.server_address[1]}/{service}/hook{query}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
