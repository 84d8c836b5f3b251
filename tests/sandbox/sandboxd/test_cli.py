"""`strata sandbox create | exec | ls | rm` against a real sandboxd."""
import os
import subprocess

import pytest

from sandboxd_harness import sandboxd_binary


def strata(daemon, *args):
    binary = os.path.join(os.path.dirname(sandboxd_binary()), "strata")
    if not os.access(binary, os.X_OK):
        pytest.skip("the strata CLI is not built")
    env = dict(os.environ, STRATA_SANDBOXD_SOCKET=daemon.socket, ASAN_OPTIONS="detect_leaks=0")
    return subprocess.run([binary, "sandbox"] + list(args), capture_output=True, text=True,
                          env=env, timeout=60)


def test_create_exec_ls_rm(daemon):
    r = strata(daemon, "create", "busybox", "--backend", "fncall", "--label", "cli=yes")
    assert r.returncode == 0, r.stderr
    sid = r.stdout.strip()
    assert sid.startswith("sb-")
    r = strata(daemon, "exec", sid, "--", "sh", "-c", "echo out; echo err >&2; exit 4")
    assert (r.returncode, r.stdout, r.stderr) == (4, "out\n", "err\n")
    r = strata(daemon, "exec", sid, "--timeout", "1", "--", "sleep", "10")
    assert r.returncode == 137 and "timeout" in r.stderr
    r = strata(daemon, "ls")
    assert r.returncode == 0 and sid in r.stdout and "cli=yes" in r.stdout
    assert strata(daemon, "rm", sid).returncode == 0
    r = strata(daemon, "rm", sid)
    assert r.returncode == 1 and "no sandbox" in r.stderr
    r = strata(daemon, "create", "no-such-image")
    assert r.returncode == 1 and "not registered" in r.stderr and r.stderr.count("\n") == 1


def test_subcommand_help(daemon):
    # Every sub-command answers --help with the usage on stdout, exit 0,
    # without asking sandboxd; after "--" it is the command's own argument.
    for sub in (["create", "--help"], ["exec", "sb-x", "--help"], ["ls", "-h"], ["rm", "--help"]):
        r = strata(daemon, *sub)
        assert (r.returncode, r.stderr) == (0, ""), (sub, r.stderr)
        assert r.stdout.startswith("Usage: strata sandbox create"), sub
    r = strata(daemon, "exec", "sb-nonexistent", "--", "echo", "--help")
    assert r.returncode == 1 and "no sandbox" in r.stderr
