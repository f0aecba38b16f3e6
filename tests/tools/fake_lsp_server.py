"""A language server that misbehaves on purpose, speaking LSP over stdio.

Run as ``python fake_lsp_server.py MODE [DELAY]``. Every line of an open
document that contains ``BAD`` gets one error diagnostic at the UTF-16
column of ``BAD`` (code ``bad``, message ``bad token``). Modes:

* ``normal``: publishes at once, with the document's version;
* ``late``: publishes DELAY seconds after a change (DELAY default 3);
* ``out_of_order``: after a change, publishes the new version, then a
  report for the previous version (as a slow worker finishing late would);
* ``stale``: after a change, first publishes the previous text's
  diagnostics under the previous version, then the new ones after DELAY;
* ``crash``: exits at the first ``didChange``;
* ``hang_init``: never answers ``initialize``;
* ``flood``: publishes 10,000 diagnostics for every version;
* ``ask``: before answering ``initialize`` it sends the client a
  ``workspace/configuration`` request and waits for the answer;
* ``garbage``: answers ``initialize`` with a header whose length is no number;
* ``huge_hover``: a hover of 200,000 characters.

``textDocument/definition`` answers the first line holding ``def NAME`` for
the word at the position, in any open document.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "normal"
DELAY = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
out_lock = threading.Lock()
docs: dict[str, tuple[int, str]] = {}


def send(message: dict) -> None:
    body = json.dumps(message).encode()
    with out_lock:
        sys.stdout.buffer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        sys.stdout.buffer.flush()


def receive() -> dict | None:
    length = None
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            return None
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    assert length is not None
    return json.loads(sys.stdin.buffer.read(length))


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def diagnostics_of(text: str) -> list[dict]:
    if MODE == "flood":
        return [
            {
                "range": {
                    "start": {"line": 0, "character": 0},
                    "end": {"line": 0, "character": 1},
                },
                "severity": 1,
                "code": "flood",
                "message": f"flood {n}",
            }
            for n in range(10_000)
        ]
    found = []
    for number, line in enumerate(text.splitlines()):
        at = line.find("BAD")
        if at >= 0:
            col = utf16(line[:at])
            found.append(
                {
                    "range": {
                        "start": {"line": number, "character": col},
                        "end": {"line": number, "character": col + 3},
                    },
                    "severity": 1,
                    "code": "bad",
                    "message": "bad token",
                }
            )
    return found


def publish(uri: str, version: int, text: str) -> None:
    send(
        {
            "jsonrpc": "2.0",
            "method": "textDocument/publishDiagnostics",
            "params": {"uri": uri, "version": version, "diagnostics": diagnostics_of(text)},
        }
    )


def later(seconds: float, uri: str, version: int, text: str) -> None:
    threading.Timer(seconds, publish, (uri, version, text)).start()


def definition(params: dict) -> list[dict]:
    uri = params["textDocument"]["uri"]
    line = params["position"]["line"]
    unit = params["position"]["character"]
    text = docs[uri][1].splitlines()[line]
    # UTF-16 unit -> character index.
    index = count = 0
    while index < len(text) and count < unit:
        count += 2 if ord(text[index]) > 0xFFFF else 1
        index += 1
    match = re.match(r"\w+", text[index:])
    word = match.group(0) if match else ""
    for other, (_, body) in docs.items():
        for number, source in enumerate(body.splitlines()):
            if re.match(rf"\s*def {re.escape(word)}\b", source):
                position = {"line": number, "character": source.index("def") + 4}
                return [{"uri": other, "range": {"start": position, "end": position}}]
    return []


def main() -> None:
    while True:
        message = receive()
        if message is None:
            return
        method = message.get("method")
        if method == "initialize":
            if MODE == "hang_init":
                continue
            if MODE == "garbage":
                with out_lock:
                    sys.stdout.buffer.write(b"Content-Length: many\r\n\r\n{}")
                    sys.stdout.buffer.flush()
                continue
            if MODE == "ask":
                send(
                    {
                        "jsonrpc": "2.0",
                        "id": "cfg-1",
                        "method": "workspace/configuration",
                        "params": {"items": [{"section": "fake"}]},
                    }
                )
                answer = receive()
                if not answer or answer.get("id") != "cfg-1" or "result" not in answer:
                    sys.exit(3)
            send({"jsonrpc": "2.0", "id": message["id"], "result": {"capabilities": {}}})
        elif method == "textDocument/didOpen":
            doc = message["params"]["textDocument"]
            docs[doc["uri"]] = (doc["version"], doc["text"])
            publish(doc["uri"], doc["version"], doc["text"])
        elif method == "textDocument/didChange":
            if MODE == "crash":
                sys.exit(1)
            uri = message["params"]["textDocument"]["uri"]
            version = message["params"]["textDocument"]["version"]
            old_version, old_text = docs[uri]
            text = message["params"]["contentChanges"][-1]["text"]
            docs[uri] = (version, text)
            if MODE == "late":
                later(DELAY, uri, version, text)
            elif MODE == "out_of_order":
                publish(uri, version, text)
                publish(uri, old_version, old_text)
            elif MODE == "stale":
                publish(uri, old_version, old_text)
                later(DELAY, uri, version, text)
            else:
                publish(uri, version, text)
        elif method == "textDocument/hover":
            value = "x" * 200_000 if MODE == "huge_hover" else "hover"
            result = {"contents": {"kind": "plaintext", "value": value}}
            send({"jsonrpc": "2.0", "id": message["id"], "result": result})
        elif method == "textDocument/definition":
            send({"jsonrpc": "2.0", "id": message["id"], "result": definition(message["params"])})
        elif method == "shutdown":
            send({"jsonrpc": "2.0", "id": message["id"], "result": None})
        elif method == "exit":
            return
        elif "id" in message and method is not None:
            send({"jsonrpc": "2.0", "id": message["id"], "result": None})
        time.sleep(0)


if __name__ == "__main__":
    main()
