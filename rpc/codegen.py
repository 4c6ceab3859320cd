"""Compile a message schema into Python source: slotted classes plus one encoder and one
decoder function per (struct, version).

Why generate instead of interpreting: a per-field interpreter pays a dictionary walk and a type
dispatch for every field of every message, which costs 5-10x on the heartbeat path. The
generated functions are straight-line code: consecutive fixed-width fields collapse into a single
precompiled ``struct.Struct`` call, varints take an inlined one-byte fast path, and version
checks happen once, when the function is chosen, not per field.

The generated module is plain Python (see :func:`source_for`) so a reader can inspect exactly
what runs for a given message and version.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import struct
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType
from typing import Any

from kraftsim.rpc import _runtime
from kraftsim.rpc.errors import DecodeError, EncodeError, UnsupportedVersionError
from kraftsim.rpc.schema import (
    FIXED_FORMATS,
    FIXED_SIZES,
    STRUCT_DEFAULT,
    ZERO_UUID_MARK,
    FieldSpec,
    MessageSpec,
    SchemaError,
    StructSpec,
)

MAX_STRING = 0x7FFF
# Precompiled structs for fixed-width arrays of up to 63 elements (replica lists, ISRs...).
_ARRAY_STRUCTS = {c: [struct.Struct(f">{n}{c}") for n in range(64)] for c in set(FIXED_FORMATS.values())}


@dataclass
class _Out:
    lines: list[str] = field(default_factory=list)

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)


class _Compiler:
    def __init__(self, msg: MessageSpec) -> None:
        self.msg = msg
        self.out = _Out()
        self.consts: dict[str, Any] = {}
        self._const_ids: dict[Any, str] = {}
        self._tmp = 0

    # ---- helpers -------------------------------------------------------------------------
    def const(self, value: Any, hint: str = "c") -> str:
        key = (hint, repr(value)) if not isinstance(value, struct.Struct) else ("S", value.format)
        name = self._const_ids.get(key)
        if name is None:
            name = f"_{hint}{len(self._const_ids)}"
            self._const_ids[key] = name
            self.consts[name] = value
        return name

    def tmp(self, base: str) -> str:
        self._tmp += 1
        return f"{base}{self._tmp}"

    def cls_name(self, s: StructSpec) -> str:
        return self.msg.name if s is self.msg.root else f"{self.msg.name}_{s.name}"

    @staticmethod
    def fn(kind: str, s: StructSpec, v: int) -> str:
        return f"_{kind}_{s.name}_{v}"

    def default_expr(self, f: FieldSpec) -> str:
        """An expression producing a fresh default value for the field."""
        d = f.default_value()
        if d is STRUCT_DEFAULT:
            return f"{self.cls_name(f.struct)}()"  # type: ignore[arg-type]
        if isinstance(d, list):
            return "[]"
        if d is ZERO_UUID_MARK:
            return "_ZERO_UUID"
        return repr(d)

    def init_default(self, f: FieldSpec) -> str:
        d = f.default_value()
        if d is STRUCT_DEFAULT or isinstance(d, list):
            return "_MISSING"
        if d is ZERO_UUID_MARK:
            return "_ZERO_UUID"
        return repr(d)

    def nondefault_expr(self, f: FieldSpec, x: str, v: int) -> str:
        """True when the value differs from the default (Kafka's rule for writing a tagged field)."""
        d = f.default_value()
        if f.is_array or f.type in ("bytes", "records"):
            if d is None:
                return f"{x} is not None"
            if v in f.nullable:
                return f"({x} is None or len({x}) > 0)"
            return f"len({x}) > 0"
        if d is STRUCT_DEFAULT:
            return f"{x} != {self.cls_name(f.struct)}()"  # type: ignore[arg-type]
        if d is None:
            return f"{x} is not None"
        if d is ZERO_UUID_MARK:
            return f"{x} != _ZERO_UUID"
        return f"{x} != {d!r}"

    # ---- classes -------------------------------------------------------------------------
    def gen_class(self, s: StructSpec, is_root: bool) -> None:
        o = self.out
        name = self.cls_name(s)
        attrs = [f.attr for f in s.fields]
        base = "_Message" if is_root else "_Struct"
        o.emit(0, f"class {name}({base}):")
        o.emit(1, f"__slots__ = {tuple(attrs + ['unknown_tagged_fields'])!r}")
        if not is_root:
            o.emit(1, f"__qualname__ = '{self.msg.name}.{s.name}'")
        params = ", ".join(f"{f.attr}={self.init_default(f)}" for f in s.fields)
        sep = ", " if params else ""
        o.emit(1, f"def __init__(self{sep}{params}, unknown_tagged_fields=None):")
        for f in s.fields:
            d = f.default_value()
            if d is STRUCT_DEFAULT:
                o.emit(2, f"self.{f.attr} = {self.cls_name(f.struct)}() if {f.attr} is _MISSING else {f.attr}")  # type: ignore[arg-type]
            elif isinstance(d, list):
                o.emit(2, f"self.{f.attr} = [] if {f.attr} is _MISSING else {f.attr}")
            else:
                o.emit(2, f"self.{f.attr} = {f.attr}")
        o.emit(2, "self.unknown_tagged_fields = unknown_tagged_fields")
        o.emit(0, "")

    # ---- encoders ------------------------------------------------------------------------
    def flex_of(self, f: FieldSpec, v: int) -> bool:
        flexible = v in self.msg.flexible
        if f.flexible_override is not None:
            return flexible and v in f.flexible_override
        return flexible

    def enc_value(self, d: int, f: FieldSpec, et: str, x: str, v: int, compact: bool, nullable: bool,
                  out: str = "out") -> None:
        """Emit code writing value ``x`` of element type ``et`` (or the array when ``f.is_array``)."""
        o = self.out
        where = f"{self.msg.name}.{f.name}"
        if et in FIXED_FORMATS:
            o.emit(d, f"{out} += {self.const(struct.Struct('>' + FIXED_FORMATS[et]), 'S')}.pack({x})")
        elif et == "uuid":
            o.emit(d, f"{out} += {x}.bytes")
        elif et == "string":
            b = self.tmp("b")
            o.emit(d, f"if {x} is None:")
            if nullable:
                o.emit(d + 1, f"{out}.append(0)" if compact else f"{out} += b'\\xff\\xff'")
            else:
                o.emit(d + 1, f"raise _EncodeError('{where} is not nullable in version {v}')")
            o.emit(d, "else:")
            o.emit(d + 1, f"{b} = {x}.encode()")
            o.emit(d + 1, f"if len({b}) > {MAX_STRING}: raise _EncodeError('{where}: string longer than {MAX_STRING} bytes')")
            if compact:
                n = self.tmp("n")
                o.emit(d + 1, f"{n} = len({b}) + 1")
                o.emit(d + 1, f"if {n} < 128: {out}.append({n})")
                o.emit(d + 1, f"else: _wuv({out}, {n})")
            else:
                o.emit(d + 1, f"{out} += _SH.pack(len({b}))")
            o.emit(d + 1, f"{out} += {b}")
        elif et in ("bytes", "records"):
            o.emit(d, f"if {x} is None:")
            if nullable:
                o.emit(d + 1, f"{out}.append(0)" if compact else f"{out} += b'\\xff\\xff\\xff\\xff'")
            else:
                o.emit(d + 1, f"raise _EncodeError('{where} is not nullable in version {v}')")
            o.emit(d, "else:")
            if compact:
                o.emit(d + 1, f"_wuv({out}, len({x}) + 1)")
            else:
                o.emit(d + 1, f"{out} += _SI.pack(len({x}))")
            o.emit(d + 1, f"{out} += {x}")
        else:  # struct
            sub = f.struct
            assert sub is not None
            if nullable:
                o.emit(d, f"if {x} is None: {out}.append(255)")
                o.emit(d, "else:")
                o.emit(d + 1, f"{out}.append(1)")
                o.emit(d + 1, f"{self.fn('e', sub, v)}({x}, {out})")
            else:
                o.emit(d, f"{self.fn('e', sub, v)}({x}, {out})")

    def enc_field(self, d: int, f: FieldSpec, x: str, v: int, out: str = "out") -> None:
        compact = self.flex_of(f, v)
        nullable = v in f.nullable
        o = self.out
        where = f"{self.msg.name}.{f.name}"
        if not f.is_array:
            self.enc_value(d, f, f.type, x, v, compact, nullable, out)
            return
        et = f.element_type
        o.emit(d, f"if {x} is None:")
        if nullable:
            o.emit(d + 1, f"{out}.append(0)" if compact else f"{out} += b'\\xff\\xff\\xff\\xff'")
        else:
            o.emit(d + 1, f"raise _EncodeError('{where} is not nullable in version {v}')")
        o.emit(d, "else:")
        d += 1
        if compact:
            n = self.tmp("n")
            o.emit(d, f"{n} = len({x}) + 1")
            o.emit(d, f"if {n} < 128: {out}.append({n})")
            o.emit(d, f"else: _wuv({out}, {n})")
        else:
            o.emit(d, f"{out} += _SI.pack(len({x}))")
        if et in FIXED_FORMATS:
            c = FIXED_FORMATS[et]
            o.emit(d, f"if {x}: {out} += (_ARR['{c}'][len({x})] if len({x}) < 64 else _PyStruct('>%d{c}' % len({x}))).pack(*{x})")
        else:
            e = self.tmp("e")
            o.emit(d, f"for {e} in {x}:")
            self.enc_value(d + 1, f, et, e, v, compact, False, out)

    def gen_encoder(self, s: StructSpec, v: int, args_mode: bool = False) -> None:
        """``args_mode``: take field values as parameters instead of an object (headers, hot path)."""
        acc = (lambda a: a) if args_mode else (lambda a: 'o.' + a)
        o = self.out
        flexible = v in self.msg.flexible
        if args_mode:
            params = ", ".join(f.attr for f in s.fields)
            o.emit(0, f"def {self.fn('a', s, v)}(out, {params}, unknown_tagged_fields=None):")
        else:
            o.emit(0, f"def {self.fn('e', s, v)}(o, out):")
        present = [f for f in s.fields if v in f.versions]
        absent = [f for f in s.fields if v not in f.versions]
        for f in absent:
            if not f.ignorable:
                o.emit(1, f"if {self.nondefault_expr(f, acc(f.attr), v)}:")
                o.emit(2, f"raise _UnsupportedVersionError('{self.msg.name}.{f.name} cannot be set in version {v}')")
        tagged = []
        regular = []
        for f in present:
            if v in f.tagged:
                if not flexible:
                    raise SchemaError(f"{self.msg.name}.{f.name}: tagged in a non-flexible version {v}")
                tagged.append(f)
            else:
                regular.append(f)
        group: list[FieldSpec] = []

        def flush() -> None:
            if not group:
                return
            fmt = ">" + "".join(FIXED_FORMATS[g.type] for g in group)
            st = self.const(struct.Struct(fmt), "S")
            o.emit(1, f"out += {st}.pack({', '.join(acc(g.attr) for g in group)})")
            group.clear()

        for f in regular:
            if not f.is_array and f.type in FIXED_FORMATS:
                group.append(f)
                continue
            flush()
            self.enc_field(1, f, acc(f.attr), v)
        flush()
        if flexible:
            if not tagged:
                o.emit(1, f"u = {acc('unknown_tagged_fields')}")
                o.emit(1, "if u: _write_unknown(out, u)")
                o.emit(1, "else: out.append(0)")
            else:
                o.emit(1, "tg = []")
                for f in sorted(tagged, key=lambda t: t.tag or 0):
                    x = self.tmp("x")
                    o.emit(1, f"{x} = {acc(f.attr)}")
                    o.emit(1, f"if {self.nondefault_expr(f, x, v)}:")
                    tb = self.tmp("tb")
                    o.emit(2, f"{tb} = bytearray()")
                    self.enc_field(2, f, x, v, tb)
                    o.emit(2, f"tg.append(({f.tag}, {tb}))")
                o.emit(1, f"u = {acc('unknown_tagged_fields')}")
                o.emit(1, "if tg or u: _write_tags(out, tg, u)")
                o.emit(1, "else: out.append(0)")
        else:
            o.emit(1, f"if {acc('unknown_tagged_fields')}:")
            o.emit(2, f"raise _EncodeError('{self.msg.name} version {v} has no tagged fields')")
        o.emit(0, "")

    # ---- decoders ------------------------------------------------------------------------
    def dec_len_compact(self, d: int, n: str) -> None:
        o = self.out
        o.emit(d, f"{n} = buf[pos]")
        o.emit(d, f"if {n} < 128: pos += 1")
        o.emit(d, f"else: {n}, pos = _ruv(buf, pos)")

    def dec_value(self, d: int, f: FieldSpec, et: str, t: str, v: int, compact: bool, nullable: bool) -> None:
        o = self.out
        where = f"{self.msg.name}.{f.name}"
        if et in FIXED_FORMATS:
            st = self.const(struct.Struct(">" + FIXED_FORMATS[et]), "S")
            o.emit(d, f"{t}, = {st}.unpack_from(buf, pos)")
            o.emit(d, f"pos += {FIXED_SIZES[et]}")
        elif et == "uuid":
            o.emit(d, "if pos + 16 > blen: raise _bad('truncated uuid')")
            o.emit(d, f"{t} = _new_uuid(_UUID)")
            o.emit(d, f"_setattr({t}, 'int', _from_bytes(buf[pos:pos + 16], 'big'))")
            o.emit(d, f"_setattr({t}, 'is_safe', _UNKNOWN_SAFE)")
            o.emit(d, "pos += 16")
        elif et in ("string", "bytes", "records"):
            n = self.tmp("n")
            if compact:
                self.dec_len_compact(d, n)
                o.emit(d, f"{n} -= 1")
            elif et == "string":
                o.emit(d, f"{n}, = _SH.unpack_from(buf, pos)")
                o.emit(d, "pos += 2")
            else:
                o.emit(d, f"{n}, = _SI.unpack_from(buf, pos)")
                o.emit(d, "pos += 4")
            o.emit(d, f"if {n} < 0:")
            if nullable:
                o.emit(d + 1, f"if {n} != -1: raise _bad('{where}: negative length')")
                o.emit(d + 1, f"{t} = None")
            else:
                o.emit(d + 1, f"raise _bad('{where}: null or negative length in a non-nullable field')")
            o.emit(d, "else:")
            e = self.tmp("end")
            if et == "string":
                o.emit(d + 1, f"if {n} > {MAX_STRING}: raise _bad('{where}: string longer than {MAX_STRING}')")
            o.emit(d + 1, f"{e} = pos + {n}")
            o.emit(d + 1, f"if {e} > blen: raise _bad('{where}: runs past the end')")
            if et == "string":
                o.emit(d + 1, f"{t} = buf[pos:{e}].decode('utf-8', 'replace')")
            else:
                o.emit(d + 1, f"{t} = buf[pos:{e}]")
            o.emit(d + 1, f"pos = {e}")
        else:
            sub = f.struct
            assert sub is not None
            if nullable:
                o.emit(d, "if buf[pos] >= 128:")
                o.emit(d + 1, f"{t} = None")
                o.emit(d + 1, "pos += 1")
                o.emit(d, "else:")
                o.emit(d + 1, f"{t}, pos = {self.fn('d', sub, v)}(buf, pos + 1)")
            else:
                o.emit(d, f"{t}, pos = {self.fn('d', sub, v)}(buf, pos)")

    def dec_field(self, d: int, f: FieldSpec, t: str, v: int) -> None:
        compact = self.flex_of(f, v)
        nullable = v in f.nullable
        o = self.out
        where = f"{self.msg.name}.{f.name}"
        if not f.is_array:
            self.dec_value(d, f, f.type, t, v, compact, nullable)
            return
        et = f.element_type
        n = self.tmp("n")
        if compact:
            self.dec_len_compact(d, n)
            o.emit(d, f"{n} -= 1")
        else:
            o.emit(d, f"{n}, = _SI.unpack_from(buf, pos)")
            o.emit(d, "pos += 4")
        o.emit(d, f"if {n} < 0:")
        if nullable:
            o.emit(d + 1, f"if {n} != -1: raise _bad('{where}: negative array length')")
            o.emit(d + 1, f"{t} = None")
        else:
            o.emit(d + 1, f"raise _bad('{where}: null or negative array length in a non-nullable field')")
        o.emit(d, f"elif {n} > blen - pos:")
        o.emit(d + 1, f"raise _bad('{where}: array count exceeds the remaining bytes')")
        o.emit(d, "else:")
        d += 1
        if et in FIXED_FORMATS:
            c = FIXED_FORMATS[et]
            o.emit(d, f"{t} = list((_ARR['{c}'][{n}] if {n} < 64 else _PyStruct('>%d{c}' % {n})).unpack_from(buf, pos))")
            o.emit(d, f"pos += {n} * {FIXED_SIZES[et]}")
        else:
            ap = self.tmp("ap")
            el = self.tmp("el")
            o.emit(d, f"{t} = []")
            o.emit(d, f"{ap} = {t}.append")
            o.emit(d, f"for _ in range({n}):")
            self.dec_value(d + 1, f, et, el, v, compact, False)
            o.emit(d + 1, f"{ap}({el})")

    def gen_decoder(self, s: StructSpec, v: int) -> None:
        o = self.out
        flexible = v in self.msg.flexible
        o.emit(0, f"def {self.fn('d', s, v)}(buf, pos):")
        o.emit(1, "blen = len(buf)")
        present = [f for f in s.fields if v in f.versions]
        tagged = [f for f in present if v in f.tagged]
        regular = [f for f in present if v not in f.tagged]
        group: list[FieldSpec] = []

        def flush() -> None:
            if not group:
                return
            fmt = ">" + "".join(FIXED_FORMATS[g.type] for g in group)
            st = self.const(struct.Struct(fmt), "S")
            names = ", ".join("f_" + g.attr for g in group)
            o.emit(1, f"{names}, = {st}.unpack_from(buf, pos)")
            o.emit(1, f"pos += {struct.calcsize(fmt)}")
            group.clear()

        for f in regular:
            if not f.is_array and f.type in FIXED_FORMATS:
                group.append(f)
                continue
            flush()
            self.dec_field(1, f, "f_" + f.attr, v)
        flush()
        unk = "None"
        if flexible:
            unk = "unk"
            for f in tagged:
                o.emit(1, f"f_{f.attr} = {self.default_expr(f)}")
            o.emit(1, "unk = None")
            self.dec_len_compact(1, "nt")
            o.emit(1, "if nt:")
            o.emit(2, f"if nt > blen - pos: raise _bad('{self.msg.name}: too many tagged fields')")
            o.emit(2, "for _ in range(nt):")
            o.emit(3, "tag, pos = _ruv(buf, pos)")
            o.emit(3, "sz, pos = _ruv(buf, pos)")
            o.emit(3, "end = pos + sz")
            o.emit(3, f"if end > blen: raise _bad('{self.msg.name}: tagged field runs past the end')")
            kw = "if"
            for f in sorted(tagged, key=lambda t: t.tag or 0):
                o.emit(3, f"{kw} tag == {f.tag}:")
                self.dec_field(4, f, "f_" + f.attr, v)
                o.emit(4, f"if pos != end: raise _bad('{self.msg.name}.{f.name}: tagged field size mismatch')")
                kw = "elif"
            if tagged:
                o.emit(3, "else:")
                o.emit(4, "if unk is None: unk = []")
                o.emit(4, "unk.append((tag, buf[pos:end]))")
                o.emit(4, "pos = end")
            else:
                o.emit(3, "if unk is None: unk = []")
                o.emit(3, "unk.append((tag, buf[pos:end]))")
                o.emit(3, "pos = end")
        args = []
        for f in s.fields:
            if v in f.versions:
                args.append("f_" + f.attr)
            else:
                args.append(self.default_expr(f))
        args.append(unk)
        o.emit(1, f"return {self.cls_name(s)}({', '.join(args)}), pos")
        o.emit(0, "")

    # ---- whole message -------------------------------------------------------------------
    def structs_in_order(self) -> list[StructSpec]:
        """Nested structs before their users so class bodies can reference them."""
        seen: list[StructSpec] = []

        def visit(s: StructSpec) -> None:
            for f in s.fields:
                if f.struct is not None and f.struct not in seen:
                    visit(f.struct)
            if s not in seen:
                seen.append(s)

        visit(self.msg.root)
        return seen

    def compile(self) -> str:
        structs = self.structs_in_order()
        for s in structs:
            self.gen_class(s, s is self.msg.root)
        versions = list(self.msg.versions())
        for s in structs:
            for v in versions:
                self.gen_encoder(s, v)
                self.gen_decoder(s, v)
        root = self.msg.root
        if self.msg.type == "header":
            for v in versions:
                self.gen_encoder(root, v, args_mode=True)
        top = max(versions)
        enc = ", ".join(self.fn("e", root, v) if v in versions else "None" for v in range(top + 1))
        dec = ", ".join(self.fn("d", root, v) if v in versions else "None" for v in range(top + 1))
        name = self.msg.name
        o = self.out
        o.emit(0, f"{name}._encoders = ({enc},)")
        o.emit(0, f"{name}._decoders = ({dec},)")
        if self.msg.type == "header":
            args = ", ".join(self.fn("a", root, v) if v in versions else "None" for v in range(top + 1))
            o.emit(0, f"{name}._arg_encoders = ({args},)")
        for s in structs:
            if s is not root:
                o.emit(0, f"{name}.{s.name} = {self.cls_name(s)}")
        return "\n".join(o.lines) + "\n"


def source_for(msg: MessageSpec) -> tuple[str, dict[str, Any]]:
    """The generated Python source of one message and the constants it refers to."""
    c = _Compiler(msg)
    return c.compile(), c.consts


def _cache_dir() -> Path | None:
    """Where compiled codecs are kept between processes (``KRAFTSIM_CODEC_CACHE``, else the
    user's cache directory); None when it is turned off (``KRAFTSIM_CODEC_CACHE=off``)."""
    where = os.environ.get("KRAFTSIM_CODEC_CACHE")
    if where == "off":
        return None
    base = Path(where) if where else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kraftsim"
    return base / f"codec-{sys.implementation.cache_tag}"


def compiled(src: str, filename: str) -> CodeType:
    """``compile(src)``, kept on disk by the source's hash: compiling the generated codecs is
    most of a process's start-up (0.9 s for every message, 0.4 s for a controller's), and the
    same source always compiles to the same code, as ``__pycache__`` relies on. A cache that
    cannot be read or written is only slower."""
    directory = _cache_dir()
    if directory is None:
        return compile(src, filename, "exec")
    key = hashlib.sha256(f"{filename}\0{src}".encode()).hexdigest()
    path = directory / f"{key}.bin"
    try:
        code = marshal.loads(path.read_bytes())
        if isinstance(code, CodeType):
            return code
    except (OSError, ValueError, EOFError, TypeError):
        pass
    code = compile(src, filename, "exec")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        _prune(directory)
        tmp = path.with_name(f"{key}.{os.getpid()}.tmp")
        tmp.write_bytes(marshal.dumps(code))
        os.replace(tmp, path)  # whole or absent, for a process reading it meanwhile
    except OSError:
        pass
    return code


CACHE_ENTRIES = 2000  # about eight versions of every codec: older entries go first


def _prune(directory: Path) -> None:
    """Keep the cache bounded as the generator and the schemas change: past CACHE_ENTRIES
    files, the least recently written half goes."""
    entries = list(directory.glob("*.bin"))
    if len(entries) < CACHE_ENTRIES:
        return
    entries.sort(key=lambda p: p.stat().st_mtime)
    for old in entries[:len(entries) // 2]:
        old.unlink(missing_ok=True)


def compile_message(msg: MessageSpec, base_message: type, base_struct: type) -> type:
    """Generate, compile and execute the codec of one message; return its root class."""
    src, consts = source_for(msg)
    ns: dict[str, Any] = {
        "_Message": base_message,
        "_Struct": base_struct,
        "_MISSING": _runtime.MISSING,
        "_ZERO_UUID": _runtime.ZERO_UUID,
        "_EncodeError": EncodeError,
        "_UnsupportedVersionError": UnsupportedVersionError,
        "_DecodeError": DecodeError,
        "_bad": _runtime.bad,
        "_ruv": _runtime.read_uvarint,
        "_wuv": _runtime.write_uvarint,
        "_uuid": _runtime.uuid_from_bytes,
        "_new_uuid": object.__new__,
        "_UUID": uuid.UUID,
        "_setattr": object.__setattr__,
        "_from_bytes": int.from_bytes,
        "_UNKNOWN_SAFE": uuid.SafeUUID.unknown,
        "_write_unknown": _runtime.write_unknown_tags,
        "_write_tags": _runtime.write_tags,
        "_pack": struct.pack,
        "_PyStruct": struct.Struct,
        "_ARR": _ARRAY_STRUCTS,
        "_unpack_from": struct.unpack_from,
        "_SH": struct.Struct(">h"),
        "_SI": struct.Struct(">i"),
        "__name__": f"kraftsim.rpc.generated.{msg.name}",
    }
    ns.update(consts)
    code = compiled(src, f"<kraftsim codec {msg.name}>")
    exec(code, ns)  # noqa: S102 - our own generated code from our own schema files
    cls = ns[msg.name]
    cls._spec = msg
    for s in _Compiler(msg).structs_in_order():
        c = ns[msg.name if s is msg.root else f"{msg.name}_{s.name}"]
        c._struct_spec = s
        c._root = cls
    cls._source = src
    return cls
