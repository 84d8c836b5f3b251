"""The SDK's extraction of a downloaded tar stream (strata.sandbox._extract)
against a hostile stream: a symlink the stream made never lets a later
member change a host file or directory outside the destination (its mode,
owner, times, contents), neither as a directory member nor as a file."""
import io
import os
import stat
import tarfile

import pytest

from strata import errors
from strata.sandbox import _extract


def stream(*members):
    """A tar stream of (TarInfo, bytes or None) pairs, opened as download()
    opens it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for info, data in members:
            info.size = len(data) if data is not None else 0
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    buf.seek(0)
    return tarfile.open(fileobj=buf, mode="r|")


def entry(name, kind, mode=0o644, link=""):
    ti = tarfile.TarInfo(name)
    ti.type, ti.mode, ti.linkname, ti.mtime = kind, mode, link, 1000
    return ti


@pytest.fixture
def host(tmp_path):
    """A host directory outside the destination, and the destination."""
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    (victim / "file").write_bytes(b"host data")
    os.chmod(victim / "file", 0o600)
    dest = tmp_path / "dest"
    dest.mkdir()
    return victim, dest


def unchanged(victim):
    st = os.stat(victim)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_mtime != 1000, oct(st.st_mode)
    f = os.stat(victim / "file")
    assert stat.S_IMODE(f.st_mode) == 0o600 and f.st_mtime != 1000
    assert (victim / "file").read_bytes() == b"host data"


def test_a_directory_over_a_symlink_to_a_host_directory(host):
    victim, dest = host
    tf = stream((entry("d", tarfile.SYMTYPE, link=str(victim)), None),
                (entry("d", tarfile.DIRTYPE, mode=0o777), None))
    _extract(tf, str(dest))
    unchanged(victim)
    assert os.path.isdir(dest / "d") and not os.path.islink(dest / "d")
    assert stat.S_IMODE(os.lstat(dest / "d").st_mode) == 0o777


def test_a_file_over_a_symlink_to_a_host_file(host):
    victim, dest = host
    tf = stream((entry("f", tarfile.SYMTYPE, link=str(victim / "file")), None),
                (entry("f", tarfile.REGTYPE, mode=0o666), b"stream data"))
    _extract(tf, str(dest))
    unchanged(victim)
    assert not os.path.islink(dest / "f") and (dest / "f").read_bytes() == b"stream data"


def test_a_file_over_a_symlink_to_a_host_directory(host):
    victim, dest = host
    tf = stream((entry("f", tarfile.SYMTYPE, link=str(victim)), None),
                (entry("f", tarfile.REGTYPE, mode=0o666), b"x"))
    _extract(tf, str(dest))
    unchanged(victim)
    assert (dest / "f").read_bytes() == b"x"


def test_a_member_below_a_symlink_out_is_refused(host):
    victim, dest = host
    tf = stream((entry("d", tarfile.SYMTYPE, link=str(victim)), None),
                (entry("d/file", tarfile.REGTYPE, mode=0o666), b"x"))
    with pytest.raises(errors.InvalidRequest):
        _extract(tf, str(dest))
    unchanged(victim)
