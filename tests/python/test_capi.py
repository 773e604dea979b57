"""The ctypes binding (zipccl/_capi.py) against the C header it follows (tools/capi/include/zipccl/zipccl_c.h):
every function with the header's parameter types, every struct with the header's fields, the same ABI
version; the library opened with CDLL (the GIL released during calls), and the C API's status codes
raised as the package's exceptions."""
import ctypes
import os
import re

import pytest

from zipccl import _capi, _errors

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "capi", "include", "zipccl",
                      "zipccl_c.h")
SCALARS = {"int": ctypes.c_int, "int32_t": ctypes.c_int32, "uint32_t": ctypes.c_uint32, "int64_t": ctypes.c_int64,
           "uint64_t": ctypes.c_uint64, "size_t": ctypes.c_size_t, "double": ctypes.c_double, "char": ctypes.c_char}
STRUCTS = {"zipccl_frame_info": _capi.FrameInfo, "zipccl_inspect_report": _capi.InspectReport,
           "zipccl_module_spec": _capi.ModuleSpec, "zipccl_module_info": _capi.ModuleInfo,
           "zipccl_group_family": _capi.GroupFamily, "zipccl_batch": _capi.CBatch, "zipccl_segment": _capi.Segment,
           "zipccl_transfer": _capi.Transfer, "zipccl_plan_info": _capi.PlanInfo}


def header():
    text = open(HEADER).read()
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def ctype(decl):
    """The ctypes type of a C type as the header writes it ("const char**", "zipccl_batch*", ...)."""
    decl = decl.replace("const ", "").strip()
    stars = decl.count("*")
    base = decl.replace("*", "").strip()
    if base == "void" and stars == 1:
        return ctypes.c_void_p
    if base == "char" and stars >= 1:
        t, stars = ctypes.c_char_p, stars - 1
    else:
        t = SCALARS.get(base) or STRUCTS[base]
    for _ in range(stars):
        t = ctypes.POINTER(t)
    return t


def param_type(param):
    """"const char**" of the parameter "const char** name"."""
    return re.fullmatch(r"(.*?)\s*\b\w+", param.strip(), flags=re.S).group(1)


def test_functions_have_the_headers_parameter_types():
    declared = {}
    for ret, name, params in re.findall(r"ZIPCCL_C_API\s+([\w\s\*]+?)\s*\b(zipccl_\w+)\s*\(([^)]*)\)\s*;", header()):
        types = [] if params.strip() == "void" else [ctype(param_type(p)) for p in params.split(",")]
        declared[name] = (ret.strip(), types)
    # The binding covers the whole C API.
    assert set(declared) == set(_capi.SIGNATURES) | {"zipccl_abi_version", "zipccl_last_error"}
    for name, argtypes in _capi.SIGNATURES.items():
        ret, types = declared[name]
        assert ret == "int", name
        assert list(argtypes) == types, name
        f = getattr(_capi._lib, name)
        assert f.restype is ctypes.c_int and list(f.argtypes) == types and f.errcheck is not None, name
    assert declared["zipccl_last_error"] == ("const char*", [])


def test_structs_have_the_headers_fields():
    text = header()
    for cname, cls in STRUCTS.items():
        body = re.search(r"typedef struct %s \{(.*?)\} %s;" % (cname, cname), text, flags=re.S).group(1)
        fields = []
        for decl in filter(None, (d.strip() for d in body.split(";"))):
            first, *more = [d.strip() for d in decl.split(",")]
            base, name = re.fullmatch(r"(.*?[\s*])\s*(\w+(?:\[\d+\])?)", first).groups()
            for d in [name] + more:  # "int32_t tp, cp, pp", "uint64_t exponent_counts[256]"
                m = re.fullmatch(r"(\w+)(\[(\d+)\])?", d)
                t = ctype(base)
                if m.group(2):
                    t = t * int(m.group(3))
                fields.append((m.group(1), t))
        assert [(n, t) for n, t in cls._fields_] == fields, cname


def test_abi_version_is_the_headers():
    m = re.search(r"#define ZIPCCL_C_ABI_VERSION (\d+)", open(HEADER).read())
    assert int(m.group(1)) == _capi.ABI_VERSION == _capi._lib.zipccl_abi_version()


def test_calls_release_the_gil():
    # CDLL releases the GIL around every call; PyDLL (and ctypes.pythonapi) hold it.
    assert type(_capi._lib) is ctypes.CDLL
    for name in _capi.SIGNATURES:
        assert not getattr(_capi._lib, name)._flags_ & ctypes._FUNCFLAG_PYTHONAPI, name


def test_status_codes_become_the_packages_exceptions():
    with pytest.raises(_errors.FormatError, match=r"^an empty input is not a zipccl stream$"):
        _capi.frames(None, 0)  # the C function's name is not in the message: Python did not call it
    bad = (ctypes.c_char * 64)(*b"not a frame" * 5)
    with pytest.raises(_errors.FormatError, match=r"^frame 0 at byte 0: "):
        _capi.decompress(ctypes.addressof(bad), 64, None, 0, 1, 0)
    with pytest.raises(ValueError, match="threads must be 1..1024, not 0"):
        _capi.decompress(ctypes.addressof(bad), 64, None, 0, 0, 0)
    with pytest.raises(_errors.LayoutError, match="not divisible"):
        _capi.validate_layout(4, {"tp": 3}, [{}])
    with pytest.raises(_errors.LimitError):
        _capi.validate_layout(1 << 30, {}, [{}])
    with pytest.raises(_errors.BatchError):
        _capi.plan(2, {}, [{}], 0, _capi.Batch([-1], 1, 2, "contiguous", "contiguous", [], []), False, "direct")
    # The library's message is the calling thread's: another thread's error does not replace it.
    import threading

    other = threading.Thread(target=lambda: pytest.raises(ValueError, _capi.decompress, None, 0, None, 0, 2000, 0))
    other.start()
    other.join()
    with pytest.raises(_errors.FormatError, match="empty"):
        _capi.decoded_size(None, 0)


def test_integers_that_do_not_fit_are_refused_not_wrapped():
    with pytest.raises(ValueError, match="does not fit"):
        _capi.validate_layout(4, {"tp": (1 << 32) + 2}, [{}])  # would wrap to tp=2
    with pytest.raises(TypeError):
        _capi.validate_layout(4, {"tp": 2.0}, [{}])
    with pytest.raises(TypeError):
        _capi.validate_layout(4, {"name": 7}, [{}])
