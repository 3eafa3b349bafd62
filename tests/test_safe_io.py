"""shuffledp.safe_io: regular files only, bounded reads, no hang, private and atomic writes."""

from __future__ import annotations

import os
import signal
import stat

import pytest

from shuffledp import safe_io
from shuffledp.safe_io import NotRegularFileError, UnsafeFileError

pytestmark = pytest.mark.skipif(os.name != "posix", reason="FIFOs and /dev/zero are POSIX")


@pytest.fixture(autouse=True)
def no_hang():
    """Fail (instead of hanging forever) if a read blocks for 10 s."""

    def boom(signum, frame):
        raise TimeoutError("safe_io blocked")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def test_reads_a_regular_file_up_to_the_limit(tmp_path):
    f = tmp_path / "a"
    f.write_bytes(b"x" * 100)
    assert safe_io.read_regular(f, 100) == b"x" * 100
    with pytest.raises(UnsafeFileError, match=r"100 bytes, more than the 99 allowed"):
        safe_io.read_regular(f, 99)
    assert safe_io.check_regular(f) == 100


def test_follows_a_link_to_a_regular_file(tmp_path):
    (tmp_path / "a").write_bytes(b"abc")
    (tmp_path / "l").symlink_to(tmp_path / "a")
    assert safe_io.read_regular(tmp_path / "l", 10) == b"abc"


@pytest.mark.parametrize("make,kind", [
    (lambda p: p.mkdir(), "a directory"),
    (lambda p: os.mkfifo(p), "a FIFO"),
    (lambda p: p.symlink_to("/dev/zero"), "a character device"),
], ids=["directory", "fifo", "link-to-dev-zero"])
def test_refuses_anything_but_a_regular_file(tmp_path, make, kind):
    p = tmp_path / "x.bin"
    make(p)
    for call in (lambda: safe_io.read_regular(p, 1 << 30, what="batch"),
                 lambda: safe_io.open_regular(p, what="batch"),
                 lambda: safe_io.count_lines(p)):
        with pytest.raises(NotRegularFileError, match=f"not a regular file \\({kind}\\)") as e:
            call()
        assert str(p) in str(e.value)
    assert "batch" in str(pytest.raises(NotRegularFileError,
                                        safe_io.read_regular, p, 1, what="batch").value)


def test_missing_and_unreadable_files_name_the_path(tmp_path):
    with pytest.raises(NotRegularFileError, match="cannot open") as e:
        safe_io.read_regular(tmp_path / "nope", 10)
    assert "nope" in str(e.value)
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    with pytest.raises(NotRegularFileError, match="cannot open"):
        safe_io.read_regular(tmp_path / "dangling", 10)


def test_reads_at_most_limit_plus_one_byte_of_a_huge_file(tmp_path, monkeypatch):
    # a sparse 64 GiB file whose size is only seen through read(): hide st_size
    f = tmp_path / "huge"
    with open(f, "wb") as fh:
        fh.truncate(64 << 30)
    real_fstat = os.fstat

    class Small:
        def __init__(self, st):
            self.st_mode, self.st_size = st.st_mode, 0

    monkeypatch.setattr(safe_io.os, "fstat", lambda fd: Small(real_fstat(fd)))
    with pytest.raises(UnsafeFileError, match="grew past the 1000 bytes"):
        safe_io.read_regular(f, 1000)
    with safe_io.open_regular(f) as fh:
        assert len(safe_io.read_up_to(fh, 4097)) == 4097


def test_text_must_be_utf8(tmp_path):
    f = tmp_path / "t"
    f.write_bytes("\ufeffé\n".encode())
    assert safe_io.read_regular_text(f, 100) == "é\n"
    f.write_bytes(b"ok\xff")
    with pytest.raises(UnsafeFileError, match=r"not UTF-8 text \(byte 2 is 0xff\)"):
        safe_io.read_regular_text(f, 100)


@pytest.mark.parametrize("content,lines", [(b"", 0), (b"a", 1), (b"a\n", 1), (b"a\nb", 2),
                                           (b"\n\n", 2)])
def test_count_lines(tmp_path, content, lines):
    f = tmp_path / "c"
    f.write_bytes(content)
    assert safe_io.count_lines(f) == lines


def test_write_atomic_replaces_a_fifo_or_link_instead_of_writing_through(tmp_path):
    fifo = tmp_path / "out.bin"
    os.mkfifo(fifo)
    safe_io.write_atomic(fifo, b"data")  # would block forever with open(..., "wb")
    assert stat.S_ISREG(os.lstat(fifo).st_mode) and fifo.read_bytes() == b"data"
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    link = tmp_path / "link"
    link.symlink_to(victim)
    safe_io.write_atomic(link, b"new")
    assert victim.read_bytes() == b"keep" and not link.is_symlink()


def test_atomic_output_leaves_nothing_on_error(tmp_path):
    target = tmp_path / "o"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), safe_io.atomic_output(target) as f:
        f.write(b"partial")
        raise RuntimeError("boom")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]


def test_create_private_is_0600_from_the_start(tmp_path, monkeypatch):
    calls = []
    real_open = os.open

    def spy(path, flags, mode=0o777, *a, **k):
        calls.append((os.fspath(path), flags, mode))
        return real_open(path, flags, mode, *a, **k)

    monkeypatch.setattr(safe_io.os, "open", spy)
    old_umask = os.umask(0)  # even a permissive umask must not widen the mode
    try:
        safe_io.create_private(tmp_path / "k", b"secret")
    finally:
        os.umask(old_umask)
    (path, flags, mode), = calls
    assert flags & os.O_CREAT and flags & os.O_EXCL and mode == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "k").st_mode) == 0o600


def test_create_private_refuses_existing_and_planted_links(tmp_path):
    k = tmp_path / "k"
    k.write_bytes(b"old")
    with pytest.raises(FileExistsError):
        safe_io.create_private(k, b"new")
    assert k.read_bytes() == b"old"
    safe_io.create_private(k, b"new", force=True)
    assert k.read_bytes() == b"new"
    target = tmp_path / "elsewhere"
    planted = tmp_path / "planted"
    planted.symlink_to(target)
    with pytest.raises(FileExistsError):
        safe_io.create_private(planted, b"secret")
    assert not target.exists()


# --------------------------------------------------------------------------- one home: writes
def test_write_atomic_durable_fsyncs_file_and_folder(tmp_path, monkeypatch):
    synced = []
    real = os.fsync

    def spy(fd):
        synced.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        real(fd)

    monkeypatch.setattr(safe_io.os, "fsync", spy)
    safe_io.write_atomic(tmp_path / "a", b"one", durable=True)
    assert (tmp_path / "a").read_bytes() == b"one"
    assert False in synced and True in synced  # the file, then its folder
    synced.clear()
    safe_io.write_atomic(tmp_path / "a", b"two")
    assert synced == [] and (tmp_path / "a").read_bytes() == b"two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


def test_atomic_path_renames_on_success_and_cleans_up_on_error(tmp_path):
    target = tmp_path / "fig.png"
    with safe_io.atomic_path(target, suffix=".png") as tmp:
        assert tmp.parent == tmp_path and tmp.name.endswith(".png") and tmp != target
        tmp.write_bytes(b"png")
    assert target.read_bytes() == b"png"
    with pytest.raises(RuntimeError):
        with safe_io.atomic_path(target, suffix=".png") as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("renderer failed")
    assert target.read_bytes() == b"png"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.png"]


def test_replace_file_moves_and_replaces(tmp_path):
    (tmp_path / "a").write_bytes(b"new")
    (tmp_path / "b").write_bytes(b"old")
    safe_io.replace_file(tmp_path / "a", tmp_path / "b", durable=True)
    assert (tmp_path / "b").read_bytes() == b"new" and not (tmp_path / "a").exists()
    with pytest.raises(FileNotFoundError):
        safe_io.replace_file(tmp_path / "a", tmp_path / "c")


# --------------------------------------------------------------------------- one home: tables
def rows(path, **kw):
    with safe_io.read_rows(path, **kw) as table:
        return table.header, list(table)


def test_read_rows_required_header_and_line_numbers(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("\ufeffY, User_ID ,x\n\n0.5,u,0.25\n\"0.1\",\"v,w\",0.2\n")
    header, body = rows(f, header="required", columns=("user_id", "x", "y"))
    assert header == ["y", "user_id", "x"]
    assert body == [(3, ["0.5", "u", "0.25"]), (4, ["0.1", "v,w", "0.2"])]
    f.write_text("user_id,x,y\nu,0.1\n")
    with pytest.raises(ValueError, match=r"t.csv, line 2: expected 3 fields \(user_id,x,y\)"):
        rows(f, header="required", columns=("user_id", "x", "y"))


@pytest.mark.parametrize("text, pattern", [
    ("", r"empty file; expected a header user_id,x\[,w\]"),
    ("user_id,x,z\n", r"unknown column\(s\) 'z'; allowed: user_id, x, w"),
    ("user_id,x,x\n", r"duplicate column\(s\) 'x'"),
    ("user_id,w\n", r"missing column\(s\) 'x'"),
])
def test_read_rows_header_errors(tmp_path, text, pattern):
    f = tmp_path / "t.csv"
    f.write_text(text)
    with pytest.raises(ValueError, match=pattern):
        rows(f, header="required", columns=("user_id", "x"), optional=("w",), what="--in")


def test_read_rows_optional_header_and_field_counts(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("user_id,item\na,1\n")
    assert rows(f, header="optional", columns=("user_id", "item")) == (
        ["user_id", "item"], [(2, ["a", "1"])])
    f.write_text("a,1\nb,2\n")
    assert rows(f, header="optional", columns=("user_id", "item"))[1] == [
        (1, ["a", "1"]), (2, ["b", "2"])]
    f.write_text("x,y\n0.1,0.2\n")
    assert rows(f, header="optional")[0] == ["x", "y"]
    f.write_text("0.1,0.2\n0.3\n")
    assert rows(f, header="optional")[0] is None
    with pytest.raises(ValueError, match=r"--p .*t.csv, line 2: expected 2 to 3 fields"):
        rows(f, fields=(2, 3), what="--p")


def test_read_rows_refuses_fifo_big_file_and_bad_csv(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFileError, match="a FIFO"):
        rows(fifo)
    f = tmp_path / "t.csv"
    f.write_text("a,b\n" * 100)
    with pytest.raises(UnsafeFileError, match="more than the 10 allowed"):
        rows(f, limit=10)
    f.write_text("a,b\n" + "x" * 200_000 + ",1\n")
    with pytest.raises(safe_io.MalformedTable, match=r"line 2: malformed CSV"):
        rows(f)
    f.write_bytes(b"a,b\n\xff,1\n")
    with pytest.raises(UnicodeDecodeError):
        rows(f)
    with pytest.raises(ValueError, match="header must be"):
        rows(f, header="yes")
