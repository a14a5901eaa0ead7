#!/usr/bin/env python3
"""qmp.py SOCKET JSON-COMMAND... : runs QMP commands in order and prints the replies;
the word wait-migrate polls query-migrate until the migration has ended (exit 1 unless
it completed). A command QEMU refuses exits 1 too."""
import json
import socket
import sys
import time

sock = socket.socket(socket.AF_UNIX)
sock.connect(sys.argv[1])
f = sock.makefile("rw")


def call(line):
    f.write(line + "\n")
    f.flush()
    while True:
        reply = json.loads(f.readline())
        if "event" in reply:
            continue
        if "error" in reply:
            sys.exit(f"{line}: {reply['error']}")
        return reply


json.loads(f.readline())  # the greeting
call('{"execute": "qmp_capabilities"}')
for command in sys.argv[2:]:
    if command != "wait-migrate":
        print(json.dumps(call(command)))
        continue
    started = time.time()
    while True:
        info = call('{"execute": "query-migrate"}')["return"]
        if info.get("status") in ("completed", "failed", "cancelled"):
            print(json.dumps(info), f"(waited {time.time() - started:.3f} s)")
            if info["status"] != "completed":
                sys.exit(1)
            break
        time.sleep(0.02)
