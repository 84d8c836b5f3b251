"""06 — interactive stdin: talk to a running command line by line.

exec_stream(..., stdin=strata.PIPE) keeps the command's stdin open; write()
sends input while its output streams back, close_stdin() is its EOF. An
iterable (a generator, a file) as stdin is streamed the same way."""
import sys

import strata
from strata import Sandbox

image = sys.argv[1] if len(sys.argv) > 1 else "busybox"
with Sandbox.create(image, backend="container") as sb:
    # A tiny REPL: sh reads a line, evaluates it, answers; we read each
    # answer before sending the next line.
    with sb.exec_stream(["sh", "-c", "while read -r l; do eval \"$l\"; echo '<done>'; done"],
                        stdin=strata.PIPE, timeout=60) as proc:
        for line in ["echo hello", "x=41; echo $((x + 1))", "hostname"]:
            proc.write(line + "\n")
            out = b""
            for ev in proc:
                out += ev.data
                if out.endswith(b"<done>\n"):
                    break
            print("%-24s -> %s" % (line, out.decode().replace("<done>\n", "").strip()))
        proc.close_stdin()
        print("exit", proc.wait().exit_code)

    # Streamed from a generator: lines are produced while the command runs.
    r = sb.exec(["wc", "-l"], stdin=(b"line %d\n" % i for i in range(10000)))
    print("wc -l counted", r.stdout.strip())

    try:
        proc = sb.exec_stream(["true"], stdin=strata.PIPE)
        proc.wait()
        proc.write(b"too late")
    except strata.StdinClosed as e:
        print("after the exit:", e.code)
