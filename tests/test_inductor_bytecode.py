"""runner.inductor_bytecode: Inductor's generated modules, loaded through torch's own loader (PyCodeCache), come from
kept bytecode from their second load on; a damaged file is compiled again, never run; a changed source is a new key."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch._inductor.codecache import PyCodeCache  # noqa: E402
from torch._inductor.runtime import compile_tasks  # noqa: E402

from runner import inductor_bytecode  # noqa: E402

SOURCE = "import math\n\ndef call(x):\n    return [math.sqrt(v) + {add} for v in x]\n"


@pytest.fixture
def kept(tmp_path, monkeypatch):
    """The loader shadowed for this test alone (install is once a process): the kept bytecode in tmp_path/bytecode."""
    monkeypatch.setattr(inductor_bytecode, "_state", inductor_bytecode._State())
    monkeypatch.setattr(compile_tasks, "compile", compile, raising=False)   # put back (removed) when the test ends
    assert inductor_bytecode.install(tmp_path / "bytecode")
    assert compile_tasks.compile is inductor_bytecode.kept_compile
    return tmp_path / "bytecode"


def load(tmp_path, add: int, folder: str = "generated"):
    """A generated module's source at a fixed path, loaded as Inductor loads its own (a fresh module each time)."""
    path = tmp_path / folder / "c0ffee.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(SOURCE.format(add=add))
    PyCodeCache.modules_no_attr.pop(str(path), None)   # torch's in-process cache: a new process's load
    return PyCodeCache.load_by_key_path("c0ffee", str(path))


def counts() -> dict:
    report = inductor_bytecode.report()["inductor_bytecode"]
    return {k: v for k, v in report.items() if k != "seconds"}


def test_the_second_load_of_a_module_is_from_its_kept_bytecode(kept, tmp_path):
    first = load(tmp_path, 1)
    assert first.call([4.0]) == [3.0]
    assert counts() == {"hits": 0, "compiled": 1, "damaged": 0, "unwritten": 0}
    (file,) = kept.iterdir()
    second = load(tmp_path, 1)
    assert second is not first and second.call([9.0]) == [4.0]
    assert second.call.__code__.co_filename == str(tmp_path / "generated" / "c0ffee.py")   # tracebacks name it
    assert counts() == {"hits": 1, "compiled": 1, "damaged": 0, "unwritten": 0}
    changed = load(tmp_path, 10)   # the same path, another source: its own key, not the old code
    assert changed.call([4.0]) == [12.0] and counts()["compiled"] == 2 and len(list(kept.iterdir())) == 2
    assert file.exists()
    elsewhere = load(tmp_path, 1, folder="another-run-folder")   # another node's cache path: the same code, renamed
    assert elsewhere.call([4.0]) == [3.0] and counts()["hits"] == 2
    assert elsewhere.call.__code__.co_filename == str(tmp_path / "another-run-folder" / "c0ffee.py")


def test_a_damaged_file_is_compiled_again_and_rewritten(kept, tmp_path):
    load(tmp_path, 1)
    (file,) = kept.iterdir()
    data = bytearray(file.read_bytes())
    data[-3] ^= 0xFF   # one flipped byte in the marshalled code
    file.write_bytes(bytes(data))
    assert load(tmp_path, 1).call([16.0]) == [5.0]
    assert counts() == {"hits": 0, "compiled": 1, "damaged": 1, "unwritten": 0}
    file.write_bytes(b"not ours")
    assert load(tmp_path, 1).call([16.0]) == [5.0] and counts()["damaged"] == 2
    assert load(tmp_path, 1).call([16.0]) == [5.0] and counts()["hits"] == 1   # rewritten intact


def test_a_folder_it_cannot_write_leaves_the_module_compiled_from_source(tmp_path, monkeypatch):
    monkeypatch.setattr(inductor_bytecode, "_state", inductor_bytecode._State())
    monkeypatch.setattr(compile_tasks, "compile", compile, raising=False)
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert inductor_bytecode.install(blocked / "bytecode")   # under a file: no folder can be made there
    assert load(tmp_path, 2).call([1.0]) == [3.0]
    assert counts() == {"hits": 0, "compiled": 0, "damaged": 0, "unwritten": 1}


def test_the_switch_takes_one_or_zero():
    assert inductor_bytecode.enabled({}) and not inductor_bytecode.enabled({inductor_bytecode.ENV: "0"})
    with pytest.raises(Exception, match="COSTSIM_INDUCTOR_BYTECODE='yes': expected 1"):
        inductor_bytecode.enabled({inductor_bytecode.ENV: "yes"})
