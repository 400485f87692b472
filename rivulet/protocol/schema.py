"""Runtime for the generated message classes: per-version codecs compiled from field tables.

The generated modules (rivulet/protocol/messages/) only declare fields. The first time a
(class, version) pair is encoded or decoded, this module writes straight-line Python for it
and compiles it, so the hot paths (Produce, Fetch) run without per-field interpretation.

Decoding is bounded: every length is checked against the end of the frame before use, and
any failure surfaces as ProtocolDecodeError.
"""

from __future__ import annotations

import keyword
import struct
import uuid
from typing import TYPE_CHECKING, Any, Callable, Generic, NamedTuple, Self, TypeAlias, TypeVar

from rivulet.protocol.accel import speedups
from rivulet.protocol.errors import ProtocolDecodeError

if TYPE_CHECKING:
    from rivulet.common.file_region import FileRegion

ZERO_UUID = uuid.UUID(int=0)
_UUID = uuid.UUID
_MISSING = object()


class F(NamedTuple):
    """One field of a generated struct."""

    name: str
    kind: str  # a primitive type name, or "struct"
    is_array: bool
    versions: tuple[int, int]
    nullable: tuple[int, int]
    tagged: tuple[int, int] | None
    tag: int | None
    default: Any  # a value, or a Struct subclass to instantiate
    struct: type | None
    flex: tuple[int, int] | None  # field-level override of the message's flexible versions


_VERSION_PREFIX = struct.Struct(">h")

# The C reader of integer-only struct arrays (rivulet.protocol._speedups), unless it is not
# built or RIVULET_NO_SPEEDUPS=1; the compiled Python readers are the reference.
_read_int_structs: Callable | None = None
_speedups = speedups()
if _speedups is not None:
    _read_int_structs = _speedups.read_int_structs


def _in(rng: tuple[int, int] | None, v: int) -> bool:
    return rng is not None and rng[0] <= v <= rng[1]


# ---------------------------------------------------------------- varints (used by compiled code)

def read_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise ProtocolDecodeError("unsigned varint too long")


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0x80:
        out.append(value)
        return
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


Part: TypeAlias = "bytes | bytearray | memoryview | FileRegion"
"""A piece of an encoded message: bytes, or a records field's FileRegion (sent from the file)."""


class OutBuf(bytearray):
    """An encode buffer that keeps large records fields out of line.

    ``chunks`` holds (position, buffer) pairs: each buffer belongs at that position of the
    output. ``parts()`` gives the pieces in order, ready for a vectored write.
    """

    __slots__ = ("chunks",)

    def __init__(self, init: int | bytes = b"") -> None:
        super().__init__(init)
        self.chunks: list[tuple[int, Part]] = []

    def total_size(self) -> int:
        return len(self) + sum(len(b) for _, b in self.chunks)

    def parts(self) -> list[Part]:
        if not self.chunks:
            return [self]
        view = memoryview(self)
        out: list[Part] = []
        start = 0
        for pos, b in self.chunks:
            out.append(view[start:pos])
            out.append(b)
            start = pos
        out.append(view[start:])
        return out


CHUNK_MIN = 16384

_FIXED = {
    "bool": ("?", 1), "int8": ("b", 1), "int16": ("h", 2), "uint16": ("H", 2),
    "int32": ("i", 4), "uint32": ("I", 4), "int64": ("q", 8), "float64": ("d", 8),
    "uuid": ("16s", 16),
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_DECODE_ERRORS = (struct.error, IndexError, ValueError, UnicodeDecodeError, TypeError, OverflowError)


class _Gen:
    """Emits the source of one reader or writer."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        # exec's namespace: the generated code's helpers and constants, and what it defines.
        self.ns: dict[str, Any] = {
            "read_uvarint": read_uvarint, "write_uvarint": write_uvarint, "UUID": _UUID,
            "Err": ProtocolDecodeError, "I16": _I16, "I32": _I32, "OutBuf": OutBuf, "CHUNK_MIN": CHUNK_MIN,
        }
        self._n = 0

    def name(self, prefix: str, obj: object) -> str:
        self._n += 1
        key = f"{prefix}{self._n}"
        self.ns[key] = obj
        return key

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)


# ---------------------------------------------------------------- reader compilation

def _read_scalar(g: _Gen, ind: int, f: F, flex: bool, nullable: bool, target: str, version: int) -> None:
    """Emit code reading one non-array value of field f into `target`."""
    k = f.kind
    if k in _FIXED:
        fmt, size = _FIXED[k]
        s = g.name("S", struct.Struct(">" + fmt))
        g.emit(ind, f"{target} = {s}.unpack_from(buf, pos)[0]; pos += {size}")
        if k == "uuid":
            g.emit(ind, f"{target} = UUID(bytes={target})")
    elif k in ("string", "bytes", "records"):
        _read_length(g, ind, "varint" if flex else "i16" if k == "string" else "i32", nullable, target,
                     f"null value for non-nullable field {f.name}")
        g.emit(ind + 1, "if pos + n > end: raise Err('field {0} runs past the frame')".replace("{0}", f.name))
        if k == "string":
            g.emit(ind + 1, f"{target} = str(buf[pos:pos + n], 'utf-8'); pos += n")
        elif k == "bytes":
            g.emit(ind + 1, f"{target} = bytes(buf[pos:pos + n]); pos += n")
        else:  # records stay a view of the frame: the broker copies once when it appends
            g.emit(ind + 1, f"{target} = buf[pos:pos + n]; pos += n")
    elif k == "struct":
        r = g.name("R", f.struct)
        if nullable:
            g.emit(ind, "p = buf[pos]; pos += 1")
            g.emit(ind, "if p == 255 or p == -1:")
            g.emit(ind + 1, f"{target} = None")
            g.emit(ind, "else:")
            g.emit(ind + 1, f"{target}, pos = {r}._reader({version}, {flex})(buf, pos, end)")
        else:
            g.emit(ind, f"{target}, pos = {r}._reader({version}, {flex})(buf, pos, end)")
    else:
        raise AssertionError(k)


_LENGTH_READS = {"varint": "n, pos = read_uvarint(buf, pos); n -= 1",
                 "i16": "n = I16.unpack_from(buf, pos)[0]; pos += 2",
                 "i32": "n = I32.unpack_from(buf, pos)[0]; pos += 4"}


def _read_length(g: _Gen, ind: int, prefix: str, nullable: bool, target: str, null_error: str) -> None:
    """Read a length into ``n``; a negative one is null (``target`` None, or ``null_error``
    raised). The caller's code for a present value follows, under the ``else:`` emitted here."""
    g.emit(ind, _LENGTH_READS[prefix])
    g.emit(ind, "if n < 0:")
    if nullable:
        g.emit(ind + 1, f"{target} = None")
    else:
        g.emit(ind + 1, f"raise Err('{null_error}')")
    g.emit(ind, "else:")


def _modes(f: F, flex: bool, version: int) -> tuple[bool, bool]:
    """Whether ``f`` is encoded flexibly at ``version`` (its own flexibleVersions, else the
    message's), and whether it may be null."""
    return (_in(f.flex, version) if f.flex is not None else flex), _in(f.nullable, version)


def _read_field(g: _Gen, ind: int, f: F, flex: bool, version: int, target: str) -> None:
    fflex, nullable = _modes(f, flex, version)
    if not f.is_array:
        _read_scalar(g, ind, f, fflex, nullable, target, version)
        return
    _read_length(g, ind, "varint" if fflex else "i32", nullable, target,
                 f"null array for non-nullable field {f.name}")
    g.emit(ind + 1, f"if n > end - pos: raise Err('array {f.name} longer than the frame')")
    g.emit(ind + 1, "lst = []")
    if f.kind == "struct":  # the element reader looked up once per array, not per element
        r = g.name("R", f.struct)
        g.emit(ind + 1, f"rd = {r}._reader({version}, {fflex})")
        plan = _int_struct_plan(f.struct, version, fflex) if _read_int_structs is not None else None
        if plan is not None:
            # Integers only (a Fetch request's thousand partitions): the whole array in C.
            args = ", ".join(g.name("K", x) for x in plan)
            g.emit(ind + 1, f"{target}, pos = {g.name('RIS', _read_int_structs)}(buf, pos, end, n, {r}, {args}, "
                            f"{fflex}, rd)")
            return
        g.emit(ind + 1, "for _ in range(n):")
        g.emit(ind + 2, "e, pos = rd(buf, pos, end)")
    else:
        g.emit(ind + 1, "for _ in range(n):")
        _read_scalar(g, ind + 2, f, fflex, False, "e", version)
    g.emit(ind + 2, "lst.append(e)")
    g.emit(ind + 1, f"{target} = lst")


_INT_CODES = {"int8": "b", "int16": "h", "int32": "i", "int64": "q"}


def _int_struct_plan(cls: type, version: int, flex: bool) -> tuple[bytes, tuple[str, ...], tuple] | None:
    """For the C array reader: the struct's body fields at ``version`` as integer codes and
    names, and the (name, default) of the others; None unless every body field is an integer
    and every other default can be shared (not a fresh list or struct)."""
    present, _ = _body_and_tagged(cls, version, flex)
    if not present or any(f.is_array or f.kind not in _INT_CODES for f in present):
        return None
    absent = [f for f in cls.FIELDS if f not in present]
    if any(f.is_array or isinstance(f.default, type) for f in absent):
        return None
    return ("".join(_INT_CODES[f.kind] for f in present).encode(), tuple(f.name for f in present),
            tuple((f.name, f.default) for f in absent))


def _fixed_runs(fields: list[F]) -> list[list[F] | F]:
    """Group consecutive fixed-width fields so one struct call reads or writes them all."""
    out: list[list[F] | F] = []
    run: list[F] = []
    for f in fields:
        if not f.is_array and f.kind in _FIXED:
            run.append(f)
            continue
        if run:
            out.append(run)
            run = []
        out.append(f)
    if run:
        out.append(run)
    return out


def _body_and_tagged(cls: type, version: int, flex: bool) -> tuple[list[F], list[F]]:
    """The fields ``cls`` has at ``version``: those in the body, in order, and the tagged ones."""
    fields = [f for f in cls.FIELDS if _in(f.versions, version)]
    tagged = [f for f in fields if flex and _in(f.tagged, version)]
    return [f for f in fields if f not in tagged], tagged


def _fixed_struct(g: _Gen, run: list[F]) -> str:
    """The name of the struct.Struct that packs a run of fixed-width fields at once."""
    return g.name("S", struct.Struct(">" + "".join(_FIXED[f.kind][0] for f in run)))


def compile_reader(cls: type, version: int, flex: bool) -> Callable:
    g = _Gen()
    new = g.name("NEW", cls.__new__)
    klass = g.name("C", cls)
    g.emit(0, "def read(buf, pos, end):")
    g.emit(1, f"o = {new}({klass})")
    present, tagged = _body_and_tagged(cls, version, flex)
    absent = [f for f in cls.FIELDS if f not in present]
    for item in _fixed_runs(present):
        if isinstance(item, list):
            s = _fixed_struct(g, item)
            names = ", ".join(f"o.{f.name}" for f in item)
            g.emit(1, f"{names}{',' if len(item) == 1 else ''} = {s}.unpack_from(buf, pos); pos += {s}.size")
            for f in item:
                if f.kind == "uuid":
                    g.emit(1, f"o.{f.name} = UUID(bytes=o.{f.name})")
        else:
            _read_field(g, 1, item, flex, version, f"o.{item.name}")
    for f in absent:
        if f.is_array or isinstance(f.default, type):  # a fresh list or struct for each message
            g.emit(1, f"o.{f.name} = _default({g.name('D', f)})")
        else:
            g.emit(1, f"o.{f.name} = {g.name('D', f.default)}")
    g.ns["_default"] = _default
    if flex:
        # Nearly always one byte (no tagged field at all): read inline, not by a call.
        g.emit(1, "ntag = buf[pos]")
        g.emit(1, "if ntag < 128: pos += 1")
        g.emit(1, "else: ntag, pos = read_uvarint(buf, pos)")
        g.emit(1, "for _ in range(ntag):")
        g.emit(2, "tag, pos = read_uvarint(buf, pos)")
        g.emit(2, "size, pos = read_uvarint(buf, pos)")
        g.emit(2, "if pos + size > end: raise Err('tagged field runs past the frame')")
        first = True
        for f in tagged:
            g.emit(2, f"{'if' if first else 'elif'} tag == {f.tag}:")
            first = False
            g.emit(3, "outer_end = end; end = pos + size; start = pos")
            _read_field(g, 3, f, flex, version, f"o.{f.name}")
            g.emit(3, "end = outer_end; pos = start + size")
        if first:
            g.emit(2, "pos += size")
        else:
            g.emit(2, "else:")
            g.emit(3, "pos += size")
    g.emit(1, "return o, pos")
    src = "\n".join(g.lines)
    exec(compile(src, f"<read {cls.__name__} v{version}>", "exec"), g.ns)
    return g.ns["read"]


# ---------------------------------------------------------------- writer compilation

def _write_scalar(g: _Gen, ind: int, f: F, flex: bool, nullable: bool, val: str, version: int) -> None:
    k = f.kind
    if k in _FIXED:
        fmt, _ = _FIXED[k]
        s = g.name("S", struct.Struct(">" + fmt))
        g.emit(ind, f"out += {s}.pack({val}.bytes)" if k == "uuid" else f"out += {s}.pack({val})")
    elif k in ("string", "bytes", "records"):
        g.emit(ind, f"if {val} is None:")
        if nullable:
            g.emit(ind + 1, "out.append(0)" if flex else ("out += b'\\xff\\xff'" if k == "string" else "out += b'\\xff\\xff\\xff\\xff'"))
        else:
            g.emit(ind + 1, "out.append(1)" if flex else ("out += b'\\x00\\x00'" if k == "string" else "out += b'\\x00\\x00\\x00\\x00'"))
        g.emit(ind, "else:")
        g.emit(ind + 1, f"b = {val}.encode('utf-8')" if k == "string" else f"b = {val}")
        if flex:
            g.emit(ind + 1, "write_uvarint(out, len(b) + 1)")
        elif k == "string":
            g.emit(ind + 1, "out += I16.pack(len(b))")
        else:
            g.emit(ind + 1, "out += I32.pack(len(b))")
        if k == "records":
            # Large record sets travel as their own buffer instead of being copied in.
            g.emit(ind + 1, "if len(b) >= CHUNK_MIN and type(out) is OutBuf: out.chunks.append((len(out), b))")
            g.emit(ind + 1, "else: out += b")
        else:
            g.emit(ind + 1, "out += b")
    elif k == "struct":
        if nullable:
            g.emit(ind, f"if {val} is None:")
            g.emit(ind + 1, "out.append(255)")
            g.emit(ind, "else:")
            g.emit(ind + 1, "out.append(1)")
            g.emit(ind + 1, f"{val}._writer({version}, {flex})({val}, out)")
        else:
            g.emit(ind, f"{val}._writer({version}, {flex})({val}, out)")
    else:
        raise AssertionError(k)


def _write_field(g: _Gen, ind: int, f: F, flex: bool, version: int, val: str) -> None:
    fflex, nullable = _modes(f, flex, version)
    if not f.is_array:
        _write_scalar(g, ind, f, fflex, nullable, val, version)
        return
    g.emit(ind, f"lst = {val}")
    g.emit(ind, "if lst is None:")
    if nullable:
        g.emit(ind + 1, "out.append(0)" if fflex else "out += b'\\xff\\xff\\xff\\xff'")
    else:
        g.emit(ind + 1, "out.append(1)" if fflex else "out += b'\\x00\\x00\\x00\\x00'")
    g.emit(ind, "else:")
    g.emit(ind + 1, "write_uvarint(out, len(lst) + 1)" if fflex else "out += I32.pack(len(lst))")
    if f.kind == "struct":
        # Every element is the same class: fetch its writer once.
        g.emit(ind + 1, "if lst:")
        g.emit(ind + 2, f"w = lst[0]._writer({version}, {flex})")
        g.emit(ind + 2, "for e in lst: w(e, out)")
    else:
        g.emit(ind + 1, "for e in lst:")
        _write_scalar(g, ind + 2, f, fflex, False, "e", version)


def compile_writer(cls: type, version: int, flex: bool) -> Callable:
    g = _Gen()
    g.emit(0, "def write(o, out):")
    present, tagged = _body_and_tagged(cls, version, flex)
    for item in _fixed_runs(present):
        if isinstance(item, list):
            s = _fixed_struct(g, item)
            args = ", ".join(f"o.{f.name}.bytes" if f.kind == "uuid" else f"o.{f.name}" for f in item)
            g.emit(1, f"out += {s}.pack({args})")
        else:
            _write_field(g, 1, item, flex, version, f"o.{item.name}")
    if flex:
        if not tagged:
            g.emit(1, "out.append(0)")
        else:
            g.emit(1, "tags = []")
            for f in tagged:
                # One default value per writer, only ever compared with: building it per
                # message (a struct for a struct default) cost more than the comparison.
                d = g.name("DV", _default(f))
                g.emit(1, f"if not o.{f.name} == {d}:")
                g.emit(2, "outer = out; out = bytearray()")
                _write_field(g, 2, f, flex, version, f"o.{f.name}")
                g.emit(2, f"tags.append(({f.tag}, out)); out = outer")
            g.emit(1, "write_uvarint(out, len(tags))")
            g.emit(1, "for tag, data in tags:")
            g.emit(2, "write_uvarint(out, tag); write_uvarint(out, len(data)); out += data")
    g.emit(1, "return out")
    src = "\n".join(g.lines)
    exec(compile(src, f"<write {cls.__name__} v{version}>", "exec"), g.ns)
    return g.ns["write"]


def _default(f: F) -> Any:  # a field's value: its type is the field's, known to generated code only
    d = f.default
    if f.is_array:
        return None if d is None else []
    if isinstance(d, type):
        return d()
    return d


def wire_shape(cls: type[Struct], version: int) -> tuple:
    """What ``cls`` puts on the wire at ``version``: each present field's type, array-ness,
    nullability, tag and tagged default in order, nested structs likewise, and whether the
    version is flexible (not the names: a renamed field is the same bytes). Two sources
    describe the same bytes exactly when their shapes are equal."""
    return (_in(cls.FLEXIBLE_VERSIONS, version), _fields_shape(cls, version))


def _fields_shape(cls: type[Struct], version: int) -> tuple:
    out = []
    for f in cls.FIELDS:
        if not _in(f.versions, version):
            continue
        tagged = _in(f.tagged, version)
        default = None if not tagged or isinstance(f.default, type) else f.default
        out.append((f.kind, f.is_array, _in(f.nullable, version), tagged, f.tag if tagged else None,
                    default, _in(f.flex, version) if f.flex is not None else None,
                    _fields_shape(f.struct, version) if f.struct is not None else None))
    return tuple(out)


def _compile_init(cls: type[Struct]) -> Callable[..., None]:
    """``cls``'s __init__: each field a keyword parameter, set to the argument or its default
    (a fresh list or struct for arrays and struct defaults, as ``_default`` gives), unknown
    keywords refused. Installed on the class, so later instances call it directly."""
    names = [f.name for f in cls.FIELDS]
    if not all(n.isidentifier() and not keyword.iskeyword(n) and n != "self" for n in names):
        init = Struct._generic_init
    else:
        ns: dict[str, Any] = {"_M": _MISSING}  # exec's namespace, as _Gen.ns
        params = ", ".join(f"{n}=_M" for n in names)
        lines = [f"def __init__(self, *, {params}{', ' if names else ''}**_extra):",
                 "    if _extra:",
                 f"        raise TypeError(f'{cls.__name__} has no field(s) {{sorted(_extra)}}')"]
        for i, f in enumerate(cls.FIELDS):
            d = f.default
            if f.is_array:
                default = "None" if d is None else "[]"
            elif isinstance(d, type):
                ns[f"D{i}"] = d
                default = f"D{i}()"
            else:
                ns[f"D{i}"] = d
                default = f"D{i}"
            lines.append(f"    self.{f.name} = {default} if {f.name} is _M else {f.name}")
        exec(compile("\n".join(lines), f"<init {cls.__name__}>", "exec"), ns)
        init = ns["__init__"]
    cls._compiled_init = staticmethod(init)  # type: ignore[attr-defined]
    cls.__init__ = init  # type: ignore[misc]
    return init


def _compile_eq(cls: type[Struct]) -> Callable[[Struct, object], bool]:
    """``cls``'s __eq__, field by field in one expression: a writer compares every tagged
    struct field with its default, per struct written, and a loop over FIELDS cost several
    times more. Installed on the class, as ``_compile_init``'s __init__."""
    names = [f.name for f in cls.FIELDS]
    if not all(n.isidentifier() and not keyword.iskeyword(n) and n not in ("self", "other") for n in names):
        eq = Struct._generic_eq
    else:
        ns: dict[str, Any] = {}  # exec's namespace, as _Gen.ns
        body = " and ".join(f"self.{n} == other.{n}" for n in names) or "True"
        src = (f"def __eq__(self, other):\n"
               f"    if type(other) is not type(self):\n"
               f"        return NotImplemented\n"
               f"    return bool({body})")
        exec(compile(src, f"<eq {cls.__name__}>", "exec"), ns)
        eq = ns["__eq__"]
    cls.__eq__ = eq  # type: ignore[method-assign,assignment]
    return eq


# ---------------------------------------------------------------- the base class

class Struct:
    """Base of every generated message and nested struct."""

    __slots__ = ()
    FIELDS: tuple[F, ...] = ()
    NAME: str = ""
    API_KEY: int = -1
    VALID_VERSIONS: tuple[int, int] = (0, -1)
    FLEXIBLE_VERSIONS: tuple[int, int] = (1, 0)

    def __init_subclass__(cls, **kw: object) -> None:
        super().__init_subclass__(**kw)
        cls._readers: dict[tuple[int, bool], Callable] = {}
        cls._writers: dict[tuple[int, bool], Callable] = {}

    def __init__(self, **kwargs: Any) -> None:  # field values, each of its field's type
        # The first instance of a class compiles the class's own __init__ (its fields as
        # keyword parameters, defaults inline): handlers build a response's structs per
        # request, and a loop over FIELDS costs several times more.
        cls = type(self)
        init = cls.__dict__.get("_compiled_init") or _compile_init(cls)
        init(self, **kwargs)

    @staticmethod
    def _generic_init(self: Struct, **kwargs: Any) -> None:  # as __init__
        for f in self.FIELDS:
            v = kwargs.pop(f.name, _MISSING)
            object.__setattr__(self, f.name, _default(f) if v is _MISSING else v)
        if kwargs:
            raise TypeError(f"{type(self).__name__} has no field(s) {sorted(kwargs)}")

    @classmethod
    def _reader(cls, version: int, flex: bool) -> Callable:
        try:
            return cls._readers[(version, flex)]
        except KeyError:
            fn = cls._readers[(version, flex)] = compile_reader(cls, version, flex)
            return fn

    @classmethod
    def _writer(cls, version: int, flex: bool) -> Callable:
        try:
            return cls._writers[(version, flex)]
        except KeyError:
            fn = cls._writers[(version, flex)] = compile_writer(cls, version, flex)
            return fn

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        return _in(cls.FLEXIBLE_VERSIONS, version)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, version: int, pos: int = 0) -> Self:
        """Decode a whole message body; trailing bytes past it are ignored."""
        obj, _ = cls.decode_from(data, version, pos)
        return obj

    @classmethod
    def decode_from(cls, data: bytes | bytearray | memoryview, version: int, pos: int = 0) -> tuple[Self, int]:
        if not _in(cls.VALID_VERSIONS, version):
            raise ProtocolDecodeError(f"{cls.NAME or cls.__name__} has no version {version}")
        buf = data if isinstance(data, memoryview) else memoryview(data)
        try:
            return cls._reader(version, cls.is_flexible(version))(buf, pos, len(buf))
        except ProtocolDecodeError:
            raise
        except _DECODE_ERRORS as e:
            raise ProtocolDecodeError(f"malformed {cls.NAME or cls.__name__} v{version}: {e}") from None

    @classmethod
    def decode_versioned(cls, data: bytes, unknown: str) -> tuple[int, Self]:
        """(version, message) of a coordinator log's record value: an int16 version, then the
        message at that version. A version outside VALID_VERSIONS raises ValueError(``unknown``
        formatted with it)."""
        (version,) = _VERSION_PREFIX.unpack_from(data, 0)
        if not _in(cls.VALID_VERSIONS, version):
            raise ValueError(unknown.format(version))
        return version, cls.decode(data, version, 2)

    def encode_into(self, out: bytearray, version: int) -> bytearray:
        return self._writer(version, self.is_flexible(version))(self, out)

    def encode(self, version: int) -> bytes:
        return bytes(self.encode_into(bytearray(), version))

    def __eq__(self, other: object) -> bool:
        # The first comparison of a class compiles the class's own __eq__ (_compile_eq).
        cls = type(self)
        eq = cls.__dict__.get("__eq__")
        if eq is None or eq is Struct.__eq__:
            eq = _compile_eq(cls)
        return eq(self, other)

    @staticmethod
    def _generic_eq(self: Struct, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in self.FIELDS)

    def __repr__(self) -> str:
        inner = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in self.FIELDS)
        return f"{type(self).__name__}({inner})"

    def to_dict(self) -> dict[str, object]:
        def conv(v: object) -> object:
            if isinstance(v, Struct):
                return v.to_dict()
            if isinstance(v, list):
                return [conv(x) for x in v]
            if isinstance(v, memoryview):
                return bytes(v)
            return v
        return {f.name: conv(getattr(self, f.name)) for f in self.FIELDS}


_Response = TypeVar("_Response", bound=Struct, covariant=True)


class Request(Struct, Generic[_Response]):
    """Base of every generated request message; its parameter is the response's class, so that
    a client's ``send`` is typed to return it (for type checkers: the wire code never looks)."""

    __slots__ = ()
