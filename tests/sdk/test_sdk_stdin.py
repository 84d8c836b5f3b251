"""SDK tests of interactive exec stdin: ``exec_stream(..., stdin=strata.PIPE)``
with write/close_stdin, iterables and files as stdin, the errors of a closed
or finished exec, fncall's typed refusal, and the same through AsyncSandbox."""
import asyncio
import io

import pytest

import strata
from strata import AsyncSandbox, Sandbox


@pytest.fixture
def box(sock, need_container):
    with Sandbox.create("busybox", backend="container", socket=sock, memory_mb=256) as sb:
        yield sb


def test_capabilities(sock, need_container):
    assert strata.capabilities("container", socket=sock)["exec_stdin_stream"] is True
    assert strata.capabilities("fncall", socket=sock)["exec_stdin_stream"] is False


def test_pipe_round_trips(box):
    with box.exec_stream(["sh", "-c", "while read l; do echo \"got $l\"; done; echo bye"],
                         stdin=strata.PIPE) as proc:
        assert proc.exec_id
        for i in range(5):  # the echo of each line comes before the next is written
            assert proc.write("line %d\n" % i) == len("line %d\n" % i)
            ev = next(proc)
            assert (ev.kind, ev.text) == ("stdout", "got line %d\n" % i)
        proc.close_stdin()
        proc.close_stdin()  # idempotent
        r = proc.wait()
    assert r.exit_code == 0 and r.stdout == "bye\n"
    with pytest.raises(strata.StdinClosed):
        proc.write(b"late")


def test_write_after_the_command_ended(box):
    proc = box.exec_stream(["true"], stdin=strata.PIPE)
    assert proc.wait().exit_code == 0
    with pytest.raises(strata.StdinClosed):
        proc.write(b"x")
    proc.close_stdin()  # no error: already over


def test_command_closing_its_stdin(box):
    proc = box.exec_stream(["sh", "-c", "exec 0<&-; echo closed; sleep 5"], stdin=strata.PIPE)
    assert next(proc).text == "closed\n"
    with pytest.raises(strata.StdinClosed):
        for _ in range(100):  # the agent notices at its first write into the pipe
            proc.write(b"y" * 65536)
    proc.close()  # kills the sleep


def test_large_and_iterable_stdin(box):
    big = b"z" * (5 << 20)  # more than one chunk and than the agent's 4 MiB queue
    proc = box.exec_stream(["wc", "-c"], stdin=strata.PIPE)
    proc.write(big)
    proc.close_stdin()
    assert proc.wait().stdout.strip() == str(len(big))
    gen = (b"%d\n" % i for i in range(1000))
    r = box.exec(["wc", "-l"], stdin=gen)
    assert r.stdout.strip() == "1000"
    r = box.exec(["cat"], stdin=io.BytesIO(b"from a file"))
    assert r.stdout == "from a file"
    assert box.exec(["cat"], stdin="up front").stdout == "up front"
    with pytest.raises(ValueError):
        box.exec(["cat"], stdin=strata.PIPE)


def test_without_pipe_write_is_refused(box):
    proc = box.exec_stream(["cat"], stdin=b"given")
    with pytest.raises(strata.StdinClosed):
        proc.write(b"more")
    assert proc.wait().stdout == "given"


def test_fncall_refuses_streamed_stdin(sock):
    with Sandbox.create("busybox", backend="fncall", socket=sock) as sb:
        with pytest.raises(strata.Unsupported):
            sb.exec_stream(["cat"], stdin=strata.PIPE)
        assert sb.exec(["cat"], stdin=b"fine").stdout == "fine"


def test_async_pipe(sock, need_container):
    async def main():
        async with await AsyncSandbox.create("busybox", backend="container", socket=sock,
                                             memory_mb=256) as sb:
            async with sb.exec_stream(["sh", "-c", "while read l; do echo \"<$l>\"; done"],
                                      stdin=strata.PIPE) as proc:
                assert proc.exec_id
                for w in ("a", "b", "c"):
                    await proc.write(w + "\n")
                    ev = await proc.__anext__()
                    assert ev.text == "<%s>\n" % w
                await proc.close_stdin()
                r = await proc.wait()
                assert r.exit_code == 0

            async def chunks():
                for i in range(3):
                    await asyncio.sleep(0.01)
                    yield b"%d\n" % i
            out = [ev async for ev in sb.exec_stream(["cat"], stdin=chunks())]
            assert b"".join(e.data for e in out if e.kind == "stdout") == b"0\n1\n2\n"
            assert out[-1].kind == "exit" and out[-1].result.exit_code == 0
            with pytest.raises(strata.StdinClosed):
                p = sb.exec_stream(["true"], stdin=strata.PIPE)
                await p.wait()
                await p.write(b"x")
    asyncio.run(main())
