"""Per-request arrays on disk (``kvtrace.analyze.spill``): they read as the arrays they hold, a
range at a time or whole, and a column widens when a value outgrows its type."""

from __future__ import annotations

import numpy as np
import pytest

from kvtrace.analyze import spill


def test_a_spilled_array_reads_as_the_array_it_holds():
    a = np.arange(3 * spill.RANGE_ROWS // 2, dtype=np.int64) * 7 - 5
    s = spill.spill(a)
    assert spill.spilled(s) and not spill.spilled(a) and not spill.spilled(s[1:])
    assert not s.flags.writeable
    np.testing.assert_array_equal(s, a)
    for lo, hi in ((0, 1), (4095, 4097), (10, len(a)), (len(a) - 1, len(a))):
        got = spill.read(s, lo, hi)
        assert not spill.spilled(got)
        np.testing.assert_array_equal(got, a[lo:hi])
    spill.release(s, a)  # pages given back, numbers kept; an array in memory is left alone
    np.testing.assert_array_equal(s, a)
    assert spill.total(s) == int(a.sum())
    assert spill.spill(s) is s
    assert len(spill.spill(np.zeros(0, np.int32))) == 0


def test_a_column_widens_when_its_values_outgrow_it():
    col = spill.empty(6, np.int32)
    assert spill.put(col, 0, np.array([1, -2], dtype=np.int64)) is col  # fits: written in place
    wide = spill.put(col, 2, np.array([2**40, -(2**33)], dtype=np.int64))
    assert wide.dtype == np.int64 and spill.spilled(wide)
    assert wide.tolist() == [1, -2, 2**40, -(2**33), 0, 0]
    np.testing.assert_array_equal(spill.filled(5, np.int32, -1), [-1] * 5)


@pytest.mark.parametrize("rows", [1, 3, 1000])
def test_ranges_cover_every_row_once(rows):
    got = list(spill.ranges(2500, rows))
    assert got[0][0] == 0 and got[-1][1] == 2500
    assert all(a[1] == b[0] for a, b in zip(got, got[1:]))


def test_spilled_files_go_to_tmpdir_or_off_a_ram_backed_tmp(monkeypatch, tmp_path):
    import os
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile reads TMPDIR again
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert spill.folder() == str(tmp_path)  # set by the user: used as it is
    a = spill.spill(np.arange(10))
    assert os.listdir(tmp_path) == [] and a.tolist() == list(range(10))  # unlinked at once
    if not spill.in_memory("/dev/shm"):
        pytest.skip("no tmpfs at /dev/shm to stand for a RAM-backed /tmp")
    monkeypatch.delenv("TMPDIR")
    monkeypatch.setattr(tempfile, "tempdir", "/dev/shm")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert spill.folder() == str(tmp_path / "cache" / "kvtrace" / "spill")
    assert spill.spill(np.arange(3)).tolist() == [0, 1, 2]
