import json

import pytest

from rlcompile import atomic


def test_write_json_replaces_the_file_and_leaves_no_scratch(tmp_path):
    path = tmp_path / "deep" / "result.json"
    atomic.write_json(path, {"a": 1})
    atomic.write_json(path, {"a": 2}, indent=1)
    assert json.loads(path.read_text()) == {"a": 2}
    assert [p.name for p in path.parent.iterdir()] == ["result.json"]


def test_a_failed_write_keeps_the_previous_file(tmp_path):
    path = tmp_path / "result.json"
    atomic.write_text(path, "old")
    with pytest.raises(RuntimeError), atomic.replacing(path) as scratch:
        scratch.write_text("half of the new")
        raise RuntimeError("killed mid-write")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_two_writers_get_different_scratch_files(tmp_path):
    path = tmp_path / "shared.bin"
    with atomic.replacing(path) as first, atomic.replacing(path) as second:
        assert first != second
        first.write_bytes(b"first")
        second.write_bytes(b"second")
    assert path.read_bytes() == b"first"  # the outer block finishes last and wins
    atomic.write_bytes(path, b"bytes")
    assert path.read_bytes() == b"bytes"
