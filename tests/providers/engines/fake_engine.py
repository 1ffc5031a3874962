"""A stand-in engine process for supervisor tests: an HTTP server that answers like an engine.

usage: fake_engine.py PORT MODE [FLAG_FILE]
  serve      answer GET /v1/models and /health with 200
  crash      print a fatal line and exit 3 before listening
  silent     never listen (the supervisor's ready timeout must fire)
  flaky      like serve, but answer 503 while FLAG_FILE exists
In every serving mode it also answers /metrics and /slots like llama-server (one request running,
one waiting, 2 slots); while FLAG_FILE holds "junk", /metrics is not Prometheus text.
"""

from __future__ import annotations

import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

METRICS = b"llamacpp:requests_processing 1\nllamacpp:requests_deferred 1\n"
SLOTS = b'[{"id": 0, "n_ctx": 100, "is_processing": true, "n_prompt_tokens": 50}, {"id": 1, "n_ctx": 100, "is_processing": false}]'


def serve(port: int, flag: Path | None) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            junk = flag is not None and flag.exists() and flag.read_text() == "junk"
            sick = flag is not None and flag.exists() and not junk
            status = 503 if sick else 200 if self.path in ("/v1/models", "/health", "/metrics", "/slots") else 404
            body = b'{"object": "list", "data": [{"id": "fake"}]}'
            if self.path == "/metrics":
                body = b"{{{" if junk else METRICS
            elif self.path == "/slots":
                body = SLOTS
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            print("fake engine:", format % args, flush=True)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"fake engine listening on {port}", flush=True)
    print('{"type": "log", "level": "warn", "msg": "fake engine warning\\n"}', flush=True)
    server.serve_forever()


def main() -> None:
    port, mode = int(sys.argv[1]), sys.argv[2]
    flag = Path(sys.argv[3]) if len(sys.argv) > 3 else None
    if mode == "crash":
        print("loading model...", flush=True)
        print("RuntimeError: fake engine failed to load the model", flush=True)
        print("shutting down", flush=True)
        sys.exit(3)
    if mode == "silent":
        print("fake engine never listens", flush=True)
        time.sleep(3600)
    serve(port, flag)


if __name__ == "__main__":
    main()
