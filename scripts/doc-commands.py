#!/usr/bin/env python3
"""Runs the shell command blocks of README.md and docs/cluster.md as a reader would type them.

Every ```sh block runs in a fresh empty directory with the built `halyard` first on PATH
(`cargo run --release -p halyard --` is replaced by `halyard`, which is what it runs). A
block is cut into the commands a person would type one at a time (a command ends where the
text so far is complete bash, checked with `bash -n`). A command started in the background
(`&`) or writing a file runs once; any other command that fails is run again for up to
RETRY_S seconds, as a person would run it again once the servers they just started are up
(a cluster's master needs a moment to hand out regions); one that still fails fails the run.
When the block ends, everything it started is killed.

A block is skipped when the line before its fence is `<!-- doc-commands: skip -->` (README's
first block: its command 2 is this test suite itself, and its command 1 is a foreground
server, checked instead by `first_command` below: started, answering `redis-cli set a b`).

  python3 scripts/doc-commands.py [--bin target/debug] [FILE...]
"""

import argparse
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time

RETRY_S = int(os.environ.get("DOC_COMMANDS_RETRY_S", "30"))
BLOCK_TIMEOUT_S = 240
SKIP = "<!-- doc-commands: skip -->"


def blocks(path):
    """(line number, text) of each ```sh block not marked to be skipped."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```sh":
            start, body = i + 1, []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            if start < 2 or lines[start - 2].strip() != SKIP:
                out.append((start + 1, "\n".join(body)))
        i += 1
    return out


def complete(text):
    return subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True).returncode == 0


def commands(block):
    """The block cut into whole commands, comments and blank lines dropped."""
    out, cur = [], []
    for line in block.split("\n"):
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        cur.append(line)
        text = "\n".join(cur)
        if not text.rstrip().endswith("\\") and complete(text):
            out.append(text)
            cur = []
    if cur:
        out.append("\n".join(cur))
    return out


def once(cmd):
    """Whether a command runs once: it starts something in the background or writes a file."""
    code = re.sub(r"#.*", "", cmd)
    return bool(re.search(r"&\s*$", code, re.M)) or "<<" in code


def script(cmds):
    lines = [
        "set -u",
        "retry() {",
        f"  local end=$((SECONDS + {RETRY_S}))",
        '  until bash -c "$1"; do',
        '    if [ $SECONDS -ge $end ]; then echo "doc-commands: failed: $1" >&2; return 1; fi',
        "    sleep 1",
        "  done",
        "}",
    ]
    for c in cmds:
        c = c.replace("cargo run --release -p halyard --", "halyard")
        if once(c):
            lines.append(c)
        else:
            lines.append(f"retry {shlex.quote(c)} || exit 1")
    return "\n".join(lines) + "\n"


def run_block(where, text, env):
    with tempfile.TemporaryDirectory(prefix="doc-commands-") as d:
        log = open(os.path.join(d, "output.log"), "w+")
        p = subprocess.Popen(["bash", "-c", script(commands(text))], cwd=d, env=env, start_new_session=True,
                             stdout=log, stderr=subprocess.STDOUT)
        try:
            rc = p.wait(timeout=BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            rc = "timeout"
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        ok = rc == 0
        print(f"doc-commands: {where}: {'ok' if ok else f'FAILED ({rc})'}", flush=True)
        if not ok:
            log.seek(0)
            print("".join(log.readlines()[-40:]), flush=True)
        return ok


def wait_port(port, seconds):
    end = time.time() + seconds
    while time.time() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.2)
    return False


def first_command(env):
    """README command 1: the single-node server on its defaults answers `redis-cli set a b`."""
    with tempfile.TemporaryDirectory(prefix="doc-commands-") as d:
        p = subprocess.Popen(["halyard", "serve"], cwd=d, env=env, start_new_session=True,
                             stderr=subprocess.DEVNULL)
        try:
            up = wait_port(6379, 60)
            out = subprocess.run(["redis-cli", "-p", "6379", "set", "a", "b"], env=env, capture_output=True,
                                 text=True, timeout=10).stdout.strip() if up else ""
        finally:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(timeout=30)
        ok = out == "OK"
        print(f"doc-commands: README.md command 1: {'ok' if ok else f'FAILED ({out!r})'}", flush=True)
        return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/debug", help="directory holding the built halyard")
    ap.add_argument("files", nargs="*", default=["README.md", "docs/cluster.md"])
    a = ap.parse_args()
    env = dict(os.environ)
    env["PATH"] = os.path.abspath(a.bin) + os.pathsep + env.get("PATH", "")
    ok = first_command(env)
    for f in a.files:
        for line, text in blocks(f):
            ok &= run_block(f"{f}:{line}", text, env)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
