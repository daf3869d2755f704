"""The compile cache's tar, as a new node unpacks it: what the job packed arrives as it was, a file the
node has is kept, and a tar that reaches out of the cache folder is refused (runner.compile_share)."""

from __future__ import annotations

import io
import tarfile

import pytest

from runner import compile_share


def test_a_packed_cache_unpacks_as_it_was_and_keeps_what_the_node_has(tmp_path):
    cache = tmp_path / "cache"
    (cache / "fxgraph" / "ab").mkdir(parents=True)
    (cache / "fxgraph" / "ab" / "entry").write_bytes(b"graph")
    (cache / "triton" / "0").mkdir(parents=True)
    (cache / "triton" / "0" / "kernel.cubin").write_bytes(b"k" * 1000)
    (cache / "triton" / "0" / "x.lock").write_bytes(b"")          # a compile in progress: left out
    files, size = compile_share.pack(cache, tmp_path / "cache.tar")
    assert (files, size) == (2, 1005)
    node = tmp_path / "node"
    (node / "fxgraph" / "ab").mkdir(parents=True)
    (node / "fxgraph" / "ab" / "entry").write_bytes(b"mine")       # what this node compiled itself stays
    assert compile_share.unpack(tmp_path / "cache.tar", node) == 1
    assert (node / "fxgraph" / "ab" / "entry").read_bytes() == b"mine"
    assert (node / "triton" / "0" / "kernel.cubin").read_bytes() == b"k" * 1000
    assert not (node / "triton" / "0" / "x.lock").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".compile-cache")] == []   # staging removed


@pytest.mark.parametrize("member", ["../outside", "link"])
def test_a_tar_that_reaches_out_of_the_cache_folder_is_refused(tmp_path, member):
    archive = tmp_path / "bad.tar"
    with tarfile.open(archive, "w") as tar:
        info = tarfile.TarInfo(member)
        if member == "link":
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(info)
        else:
            info.size = 3
            tar.addfile(info, io.BytesIO(b"bad"))
    with pytest.raises(tarfile.TarError):
        compile_share.unpack(archive, tmp_path / "cache")
    assert not (tmp_path / "outside").exists() and not list((tmp_path / "cache").rglob("*"))


def test_an_absolute_name_lands_inside_the_cache_folder(tmp_path):
    archive = tmp_path / "abs.tar"
    with tarfile.open(archive, "w") as tar:
        info = tarfile.TarInfo(str(tmp_path / "elsewhere"))
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    assert compile_share.unpack(archive, tmp_path / "cache") == 1
    assert not (tmp_path / "elsewhere").exists()
    assert [p.read_bytes() for p in (tmp_path / "cache").rglob("elsewhere")] == [b"abc"]


def test_the_key_names_torch_and_the_device():
    assert compile_share.cache_key("2.13.0+cpu", "NVIDIA H200") == "compile-cache/torch-2.13.0_cpu-NVIDIA_H200.tar"
