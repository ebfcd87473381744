"""The ctypes layer against the library, in one process: struct layouts,
the status list, the version, the report, the configuration table and
how the library is found."""
from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import fabxfer
from fabxfer import _lib
from conftest import one_rank


def test_version_matches_package():
    assert fabxfer.version() == fabxfer.__version__
    v = _lib.lib().fx_version()
    assert (v >> 16, (v >> 8) & 0xFF) == fabxfer.EXPECTED == (0, 7)


def test_ctx_opts_layout_agrees_with_the_library():
    # fx_ctx_opts_init into a scratch buffer larger than any struct: the
    # struct_size it writes is the library's sizeof(fx_ctx_opts_t).
    buf = (ctypes.c_char * 4096)()
    _lib.lib().fx_ctx_opts_init(buf)
    theirs = _lib.CtxOpts.from_buffer(buf)
    assert theirs.struct_size == ctypes.sizeof(_lib.CtxOpts)
    ours = _lib.CtxOpts()
    ours.init_defaults()
    assert bytes(buf[:ctypes.sizeof(ours)]) == bytes(ours)
    assert (theirs.rank, theirs.single_host, theirs.log_level) == (-1, -1, -1)
    # The header's FX_CTX_OPTS_SIZE_0_3, offsetof(timeout_ms) + sizeof(int),
    # is a size the library takes; one byte more is refused.
    size_0_3 = _lib.CtxOpts.timeout_ms.offset + 4
    for size, ok in ((size_0_3, True), (size_0_3 + 1, False)):
        o = _lib.CtxOpts()
        o.init_defaults()
        o.struct_size = size
        o.bootstrap, o.rank, o.size = b"none", 0, 1
        o.provider = b"tcp;ofi_rxm"
        h = ctypes.c_void_p()
        st = _lib.lib().fx_ctx_create(ctypes.byref(o), ctypes.byref(h))
        assert (st == 0) == ok, fabxfer.errors.last_error()
        if ok:
            assert _lib.lib().fx_ctx_rank(h) == 0
            _lib.lib().fx_ctx_destroy(h)
        else:
            assert "struct_size is %d" % size in fabxfer.errors.last_error()


def test_header_fields_are_mirrored(header_text):
    """Every field of the header's two structs, in order, is in ours."""
    for cname, cls in (("fx_ctx_opts", _lib.CtxOpts),
                       ("fx_report", _lib.Report)):
        body = re.search(r"typedef struct %s \{(.*?)\} " % cname,
                         header_text, re.S).group(1)
        body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
        fields = re.findall(r"(\w+)(?:\[\w+\])?;", body)
        assert fields == [f[0] for f in cls._fields_], cname


def test_context_with_our_struct_works():
    with fabxfer.Context(bootstrap="none", rank=0, size=1,
                         provider="tcp;ofi_rxm", timeout_ms=1234,
                         bucket_size="64K", bucket_depth=3,
                         log_level="error", notify="auto",
                         gpu_path="staged") as ctx:
        assert (ctx.rank, ctx.size) == (0, 1)
        assert ctx.provider == "tcp;ofi_rxm"
        assert ctx.notify_mode in ("writedata", "message")
        assert ctx.rails == 1
        domain, nbytes = ctx.rail(0)
        assert domain and nbytes == 0
        with pytest.raises(fabxfer.RangeError):
            ctx.rail(1)
        assert ctx.gpu_path is None
    assert ctx.closed
    ctx.close()  # idempotent


def test_session_report_copy_and_json(ctx1):
    """A one-rank job (source and target of its own tensors): the report
    copied with our struct_size, its dict has fx_report_json's keys."""
    m = fabxfer.Manifest.from_tensors(
        {"w": ("f32", (32, 8)), "b": ("bf16", (5,))},
        {0: ["w", "b"]}, {0: {"w": fabxfer.shard((32, 8), 0, 0, 1),
                              "b": None}})
    src = {"w": np.arange(256, dtype=np.float32).reshape(32, 8),
           "b": np.arange(5, dtype=np.uint16)}
    dst = {"w": np.zeros((32, 8), np.float32), "b": np.zeros(5, np.uint16)}
    with fabxfer.Session(ctx1, m) as s:
        for n in src:
            # numpy has no bf16: its bits as uint16, bound as raw bytes
            s.bind(fabxfer.SOURCE, n, src[n], raw=n == "b")
            s.bind("target", n, dst[n], raw=n == "b")
        s.setup()
        s.push(1)
        rep = s.report_struct()
        assert rep.struct_size == ctypes.sizeof(_lib.Report)
        assert rep.version == 1 and rep.bytes == 256 * 4 + 5 * 2
        pushed = s.report()["paths"]
        sent = rep.verify_sent
        s.wait(1)
        assert dst["w"].tobytes() == src["w"].tobytes()
        assert dst["b"].tobytes() == src["b"].tobytes()
        d = s.report()
        # The library's own struct, through fx_session_report.
        lib_rep = _lib.lib().fx_session_report(s.handle).contents
        assert lib_rep.struct_size == ctypes.sizeof(_lib.Report)
        assert lib_rep.version == 1
    # npaths and its array are one key, "paths"
    expected = [f for f, _ in _lib.Report._fields_
                if f not in ("struct_size", "npaths")]
    expected.insert(expected.index("seconds") + 1, "gb_per_s")
    assert list(d) == expected
    assert d["version"] == 1 and d["bytes"] == 256 * 4 + 5 * 2
    # one path, which carried the push and is what the wait expects; no
    # peer but itself
    # the push's path carried the checksums too (FABXFER_VERIFY=sample:
    # a head and a CRC per tensor, one write); the wait expects the data
    assert sent == 24 + 4 * 2
    assert pushed == [{"provider": "tcp;ofi_rxm", "peers": 0,
                       "bytes": 256 * 4 + 5 * 2 + sent, "writes": 3}], pushed
    assert d["paths"] == [dict(pushed[0], bytes=256 * 4 + 5 * 2,
                               writes=0)], d["paths"]
    assert d["registrations"] > 0


def test_report_copy_refuses_an_unknown_size(ctx1):
    m = fabxfer.Manifest.from_tensors({"w": ("u8", (8,))}, {0: ["w"]},
                                      {0: ["w"]})
    with fabxfer.Session(ctx1, m) as s:
        rep = _lib.Report()
        rep.struct_size = 3
        st = _lib.lib().fx_session_report_copy(s.handle, ctypes.byref(rep))
        with pytest.raises(fabxfer.InvalidArgumentError, match="struct_size"):
            ctx1._check(st)
        # An older, smaller struct (up to "bytes") is a size it knows.
        rep.struct_size = _lib.Report.bytes.offset + 8
        assert _lib.lib().fx_session_report_copy(s.handle,
                                                 ctypes.byref(rep)) == 0
        buf = ctypes.create_string_buffer(256)
        n = _lib.lib().fx_report_json(ctypes.byref(rep), buf, 256)
        assert buf.value.decode() == '{"version": 0, "bytes": 0}'
        assert n == len(buf.value)


def test_every_status_has_its_class(header_text):
    block = header_text[header_text.index("#define FX_STATUS_LIST"):]
    block = block[:block.index("typedef enum fx_status")]
    statuses = re.findall(r"X\((FX_\w+),\s*(-?\d+),", block)
    assert len(statuses) >= 15
    classes = set()
    for name, code in statuses:
        code = int(code)
        assert fabxfer.STATUS_NAMES[code] == name
        if code == 0:
            continue
        cls = fabxfer.error_class(code)
        assert cls is not fabxfer.FabxferError, name
        assert cls.__name__ in fabxfer.__all__
        assert getattr(fabxfer, cls.__name__) is cls
        classes.add(cls)
        e = fabxfer.errors.make_error(code, "why")
        assert isinstance(e, cls) and isinstance(e, RuntimeError)
        assert (e.code, e.name, e.detail) == (code, name, "why")
        assert str(e) == "%s (%d): why" % (name, code)
        assert fabxfer.strerror(code)
    assert len(classes) == len(statuses) - 1
    assert issubclass(fabxfer.FxTimeoutError, TimeoutError)


def test_config_table():
    rows = fabxfer.config()
    names = [r[0] for r in rows]
    assert "FABXFER_TIMEOUT_MS" in names and "FABXFER_LIBRARY" in names
    row = dict((r[0], r) for r in rows)["FABXFER_TIMEOUT_MS"]
    assert row[1] == "30000" and row[2]
    assert dict((r[0], r) for r in rows)["FABXFER_PROVIDER"][1] is None


def test_dtypes_and_shards():
    import torch

    assert fabxfer.dtype_name(torch.bfloat16) == "bf16"
    assert fabxfer.dtype_name(torch.float16) == "f16"
    assert fabxfer.dtype_name(torch.bool) == "bool"
    assert fabxfer.dtype_name(np.float32) == "f32"
    assert fabxfer.dtype_name(np.dtype("int64")) == "i64"
    assert fabxfer.dtype_name("bfloat16") == "bfloat16"  # the library's
    with pytest.raises(ValueError, match="complex64"):
        fabxfer.dtype_name(torch.complex64)
    assert fabxfer.shard((10, 6), 0, 1, 2) == (0, 5, 10)
    assert [fabxfer.shard((1000,), 0, i, 3) for i in range(3)] == \
        [(0, 0, 333), (0, 333, 666), (0, 666, 1000)]
    with pytest.raises(ValueError):
        fabxfer.shard((2,), 0, 0, 3)
    m = fabxfer.Manifest.from_tensors(
        {"t": torch.zeros(4, 6, dtype=torch.bfloat16),
         "a": np.zeros((3,), np.int16), "p": ("f64", ())},
        {0: {"t": (1, 0, 3), "a": None, "p": None},
         1: {"t": fabxfer.shard((4, 6), 1, 1, 2)}},
        {2: ["t", "a", "p"]})
    assert m.tensor_names == ["t", "a", "p"] and len(m) == 3
    assert m.tensor("t") == ("bf16", (4, 6))
    assert m.piece_bytes(0, fabxfer.SOURCE, "t") == 4 * 3 * 2
    assert m.piece_shape(1, "source", "t") == (4, 3)
    assert m.piece_bytes(2, fabxfer.TARGET, "p") == 8
    # The same manifest as JSON gives the same record.
    j = fabxfer.Manifest.from_dict({
        "tensors": [{"name": "t", "dtype": "bf16", "shape": [4, 6]}],
        "ranks": [{"rank": 0, "source": [{"tensor": "t"}]},
                  {"rank": 1, "target": [{"tensor": "t", "dim": 0,
                                          "start": 1, "end": 3}]}]})
    assert j.piece_shape(1, fabxfer.TARGET, "t") == (2, 6)
    assert j.piece_bytes(1, fabxfer.TARGET, "t") == 24


def test_manifest_load(tmp_path):
    p = tmp_path / "m.json"
    p.write_text('{"tensors": [{"name": "w", "dtype": "f32", "shape": [3]}],'
                 ' "ranks": [{"rank": 0, "source": [{"tensor": "w"}]}]}')
    m = fabxfer.Manifest.load(p)
    assert m.tensor_names == ["w"] and m.piece_bytes(0, "source", "w") == 12
    with pytest.raises(fabxfer.FabxferError, match="nope.json"):
        fabxfer.Manifest.load(tmp_path / "nope.json")


def test_region_keeps_the_object_and_blob_roundtrip():
    with fabxfer.Context(bootstrap="none", rank=0, size=1,
                         provider="tcp;ofi_rxm") as ctx:
        src = bytearray(b"hello, fabxfer!!")
        dst = np.zeros(16, np.uint8)
        rs = ctx.register(src, source=True)
        rt = ctx.register(dst, target=True)
        ro = ctx.register(b"read-only source", source=True)
        with pytest.raises(BufferError):
            src.extend(b"x")  # held while registered
        assert rt.id == 0 and rs.obj is src and rt.nbytes == 16
        ctx.blob_import(ctx.blob_export())
        ctx.write(rs, 0, 0, rt.id, 0, 16)
        ctx.notify(0, 42)
        assert ctx.wait_notify(0) == 42
        assert dst.tobytes() == bytes(src)
        ctx.write(ro, 0, 0, rt.id, 0, 9)
        ctx.quiet()
        ctx.progress()
        assert dst.tobytes()[:9] == b"read-only"
        with pytest.raises(fabxfer.RangeError):
            ctx.write(rs, 0, 0, rt.id, 8, 16)
        rs.close()
        rs.close()
        src.extend(b"x")  # released
        assert rs.closed and rs not in ctx.regions
    assert rt.closed
    with pytest.raises(fabxfer.StateError):
        rt.id


def test_library_not_found_names_the_path(tmp_path):
    env = dict(os.environ, FABXFER_LIBRARY=str(tmp_path / "nolib.so"))
    out = subprocess.run(
        [sys.executable, "-c", "import fabxfer\n"
         "try:\n    fabxfer.version()\n"
         "except fabxfer.LibraryLoadError as e:\n    print(e)\n"],
        env=env, capture_output=True, text=True, timeout=60)
    assert "FABXFER_LIBRARY=%s cannot be loaded" % (tmp_path / "nolib.so") \
        in out.stdout, out.stdout + out.stderr


def test_one_rank_helper_allgather_and_barrier():
    with one_rank() as ctx:
        assert ctx.allgather(b"abc") == [b"abc"]
        assert ctx.allgather(b"") == [b""]
        ctx.barrier()
        ctx.exchange()


def test_shard_splits_unlike_torch_chunk():
    """python/README: shard gives piece i [i*n//count, (i+1)*n//count):
    sizes differ by one at most, the larger ones spread (10 in 4: 2, 3, 2,
    3), where torch.chunk makes ceil(n/count)-sized pieces and a short last
    one (3, 3, 3, 1) and torch.tensor_split gives the first n % count one
    more (3, 3, 2, 2). They agree where count divides n."""
    import torch

    def sizes(n, count):
        return [e - s for _, s, e in
                (fabxfer.shard((n,), 0, i, count) for i in range(count))]

    t = torch.arange(10)
    assert sizes(10, 4) == [2, 3, 2, 3]
    assert [len(c) for c in torch.chunk(t, 4)] == [3, 3, 3, 1]
    assert [len(c) for c in torch.tensor_split(t, 4)] == [3, 3, 2, 2]
    assert sizes(1000, 3) == [333, 333, 334]
    assert [len(c) for c in torch.chunk(torch.arange(1000), 3)] == \
        [334, 334, 332]
    for n, count in ((12, 4), (4096, 8)):
        assert sizes(n, count) == \
            [len(c) for c in torch.chunk(torch.arange(n), count)]
    # torch.chunk's pieces as explicit ranges, for a framework that cuts so
    step = -(-10 // 4)
    chunks = [(0, min(i * step, 10), min((i + 1) * step, 10))
              for i in range(4)]
    assert [e - s for _, s, e in chunks] == [3, 3, 3, 1]
