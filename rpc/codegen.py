"""Compile a message schema into Python source: slotted classes plus one encoder and one
decoder function per (message, version).

Why generate instead of interpreting: a per-field interpreter pays a dictionary walk and a type
dispatch for every field of every message, which costs 5-10x on the heartbeat path. The
generated functions are straight-line code, shaped by what costs in CPython:

* calls: nested structs are written out inside their parent's function (a Python call and a
  result tuple per element saved), and decoded objects are bare instances whose slots are
  assigned as the bytes are read (no ``__init__`` call with its defaults);
* fixed-width fields: consecutive ones are one precompiled ``struct.Struct`` call, which also
  takes a following non-compact string's length and, after the last run, the tag section's
  first byte;
* the common case inline: one-byte varint lengths, strict UTF-8, null strings and the empty tag
  section are read and written inline; anything else goes to a runtime helper;
* version checks happen once, when the function is chosen, not per field.

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
from kraftsim.rpc.codec_errors import DecodeError, EncodeError, UnsupportedVersionError
from kraftsim.rpc.file_slice import FileSlice, put_slice
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
# Nested structs are inlined into their parent's coder up to this depth (Kafka's schemas nest
# at most five deep); deeper ones get a function of their own.
MAX_INLINE_DEPTH = 8
# Precompiled structs for fixed-width arrays of up to 63 elements (replica lists, ISRs...).
# The slot descriptors of uuid.UUID: setting through them skips object.__setattr__'s lookup.
_UUID_INT_SLOT: Any = vars(uuid.UUID)["int"]
_UUID_SAFE_SLOT: Any = vars(uuid.UUID)["is_safe"]
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
        self._wanted: list[tuple[str, StructSpec, int]] = []
        self._wanted_keys: set[tuple[str, str, int]] = set()
        # Emitting a view decoder (see :meth:`gen_decoder`): ``buf`` is a read-only memoryview.
        self.views = False

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

    def maybe_nondefault_expr(self, f: FieldSpec, x: str, v: int) -> str:
        """Cheaper than :meth:`nondefault_expr` and true whenever it is (and for anything it
        would reject): a list's truth value instead of ``len()``."""
        d = f.default_value()
        if (f.is_array or f.type in ("bytes", "records")) and d is not None:
            return f"{x} or {x} is None"
        return self.nondefault_expr(f, x, v)

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

    def inline_ok(self, sub: StructSpec, stack: tuple[StructSpec, ...]) -> bool:
        """Nested structs are written out in their parent's function (no call, no tuple per
        element) unless they nest too deep or refer to themselves."""
        return len(stack) < MAX_INLINE_DEPTH and sub not in stack

    def call_fn(self, kind: str, sub: StructSpec, v: int) -> str:
        """The name of a standalone coder, queued for generation (used where inlining stops)."""
        key = (kind, sub.name, v)
        if key not in self._wanted_keys:
            self._wanted_keys.add(key)
            self._wanted.append((kind, sub, v))
        return self.fn(kind, sub, v)

    def enc_compact_len(self, d: int, n: str, out: str) -> None:
        o = self.out
        o.emit(d, f"if {n} < 128: {out}.append({n})")
        o.emit(d, f"else: _wuv({out}, {n})")

    def enc_value(self, d: int, f: FieldSpec, et: str, x: str, v: int, compact: bool, nullable: bool,
                  out: str, stack: tuple[StructSpec, ...]) -> None:
        """Emit code writing value ``x`` (a local name) of element type ``et``."""
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
            n = self.tmp("n")
            o.emit(d + 1, f"{n} = len({b})")
            if compact:
                # Lengths under 127 fit the one-byte varint: the common case takes one branch.
                o.emit(d + 1, f"if {n} < 127: {out}.append({n} + 1)")
                o.emit(d + 1, "else:")
                o.emit(d + 2, f"if {n} > {MAX_STRING}: raise _EncodeError('{where}: string longer than {MAX_STRING} bytes')")
                o.emit(d + 2, f"_wuv({out}, {n} + 1)")
            else:
                o.emit(d + 1, f"if {n} > {MAX_STRING}: raise _EncodeError('{where}: string longer than {MAX_STRING} bytes')")
                o.emit(d + 1, f"{out} += _SH.pack({n})")
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
            if et == "records":  # served from a segment file: a hole for the bytes, not a copy
                o.emit(d + 1, f"if {x}.__class__ is _FileSlice: _put_slice({out}, {x})")
                o.emit(d + 1, f"else: {out} += {x}")
            else:
                o.emit(d + 1, f"{out} += {x}")
        else:  # struct
            sub = f.struct
            assert sub is not None
            if nullable:
                o.emit(d, f"if {x} is None: {out}.append(255)")
                o.emit(d, "else:")
                o.emit(d + 1, f"{out}.append(1)")
                d += 1
            if self.inline_ok(sub, stack):
                self.enc_struct(d, sub, v, lambda a: f"{x}.{a}", out, stack + (sub,))
            else:
                o.emit(d, f"{self.call_fn('e', sub, v)}({x}, {out})")

    def enc_field(self, d: int, f: FieldSpec, x: str, v: int, out: str, stack: tuple[StructSpec, ...]) -> None:
        """Emit code writing field ``f`` whose value is the local ``x``."""
        compact = self.flex_of(f, v)
        nullable = v in f.nullable
        o = self.out
        where = f"{self.msg.name}.{f.name}"
        if not f.is_array:
            self.enc_value(d, f, f.type, x, v, compact, nullable, out, stack)
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
            self.enc_compact_len(d, n, out)
        else:
            o.emit(d, f"{out} += _SI.pack(len({x}))")
        if et in FIXED_FORMATS:
            c = FIXED_FORMATS[et]
            arr = self.const(_ARRAY_STRUCTS[c], "A")
            o.emit(d, f"if {x}: {out} += ({arr}[len({x})] if len({x}) < 64 else _PyStruct('>%d{c}' % len({x}))).pack(*{x})")
        else:
            e = self.tmp("e")
            o.emit(d, f"for {e} in {x}:")
            self.enc_value(d + 1, f, et, e, v, compact, False, out, stack)

    def enc_struct(self, d: int, s: StructSpec, v: int, acc: Any, out: str,
                   stack: tuple[StructSpec, ...]) -> None:
        """Emit code writing one struct; ``acc(attr)`` is the expression reading a field."""
        o = self.out
        flexible = v in self.msg.flexible
        present = [f for f in s.fields if v in f.versions]
        for f in s.fields:
            if v not in f.versions and not f.ignorable:
                o.emit(d, f"if {self.nondefault_expr(f, acc(f.attr), v)}:")
                o.emit(d + 1, f"raise _UnsupportedVersionError('{self.msg.name}.{f.name} cannot be set in version {v}')")
        tagged = []
        regular = []
        for f in present:
            if v in f.tagged:
                if not flexible:
                    raise SchemaError(f"{self.msg.name}.{f.name}: tagged in a non-flexible version {v}")
                tagged.append(f)
            else:
                regular.append(f)
        # Runs of fixed-width fields are packed by one precompiled struct; a non-compact
        # string's length joins the run before it, and so does the empty tag section's zero
        # byte after the last run.
        group: list[str] = []
        fmt: list[str] = []

        def flush(extra: str = "", extra_fmt: str = "") -> None:
            if not group and not extra:
                return
            st = self.const(struct.Struct(">" + "".join(fmt) + extra_fmt), "S")
            o.emit(d, f"{out} += {st}.pack({', '.join(group + ([extra] if extra else []))})")
            group.clear()
            fmt.clear()

        for f in regular:
            if not f.is_array and f.type in FIXED_FORMATS:
                group.append(acc(f.attr))
                fmt.append(FIXED_FORMATS[f.type])
                continue
            x = self.tmp("x")
            if group and f.type == "string" and not self.flex_of(f, v):
                self.enc_string_len_first(d, f, x, acc(f.attr), v)
                flush(f"{x}_n", "h")
                o.emit(d, f"{out} += {x}_b")
                continue
            flush()
            o.emit(d, f"{x} = {acc(f.attr)}")
            self.enc_field(d, f, x, v, out, stack)
        u = self.tmp("u")
        o.emit(d, f"{u} = {acc('unknown_tagged_fields')}")
        if not flexible:
            flush()
            o.emit(d, f"if {u}:")
            o.emit(d + 1, f"raise _EncodeError('{self.msg.name} version {v} has no tagged fields')")
            return
        xs = []
        for f in sorted(tagged, key=lambda t: t.tag or 0):
            x = self.tmp("x")
            o.emit(d, f"{x} = {acc(f.attr)}")
            xs.append((f, x))
        # Tagged fields at their defaults are the usual case: one test, then the empty section.
        cond = " or ".join([f"({self.maybe_nondefault_expr(f, x, v)})" for f, x in xs] + [u])
        pending, pending_fmt = list(group), list(fmt)
        o.emit(d, f"if {cond}:")
        d += 1
        flush()
        if not tagged:
            o.emit(d, f"_write_unknown({out}, {u})")
        else:
            tg = self.tmp("tg")
            o.emit(d, f"{tg} = []")
            for f, x in xs:
                o.emit(d, f"if {self.nondefault_expr(f, x, v)}:")
                tb = self.tmp("tb")
                o.emit(d + 1, f"{tb} = bytearray()")
                self.enc_field(d + 1, f, x, v, tb, stack)
                o.emit(d + 1, f"{tg}.append(({f.tag}, {tb}))")
            o.emit(d, f"_write_tags({out}, {tg}, {u})")
        d -= 1
        o.emit(d, "else:")
        d += 1
        if pending:
            group[:], fmt[:] = pending, pending_fmt
            flush("0", "B")
        else:
            o.emit(d, f"{out}.append(0)")

    def enc_string_len_first(self, d: int, f: FieldSpec, x: str, value: str, v: int) -> None:
        """Encode a non-compact string ahead of the fixed-width run before it: ``{x}_b`` the
        bytes, ``{x}_n`` the int16 length (-1 for null)."""
        o = self.out
        where = f"{self.msg.name}.{f.name}"
        o.emit(d, f"{x} = {value}")
        o.emit(d, f"if {x} is None:")
        if v in f.nullable:
            o.emit(d + 1, f"{x}_b = b''")
            o.emit(d + 1, f"{x}_n = -1")
        else:
            o.emit(d + 1, f"raise _EncodeError('{where} is not nullable in version {v}')")
        o.emit(d, "else:")
        o.emit(d + 1, f"{x}_b = {x}.encode()")
        o.emit(d + 1, f"{x}_n = len({x}_b)")
        o.emit(d + 1, f"if {x}_n > {MAX_STRING}: raise _EncodeError('{where}: string longer than {MAX_STRING} bytes')")

    def gen_encoder(self, s: StructSpec, v: int, args_mode: bool = False) -> None:
        """``args_mode``: take field values as parameters instead of an object (headers, hot path)."""
        o = self.out
        if args_mode:
            params = ", ".join(f.attr for f in s.fields)
            o.emit(0, f"def {self.fn('a', s, v)}(out, {params}, unknown_tagged_fields=None):")
            self.enc_struct(1, s, v, lambda a: a, "out", (s,))
        else:
            o.emit(0, f"def {self.fn('e', s, v)}(o, out):")
            self.enc_struct(1, s, v, lambda a: f"o.{a}", "out", (s,))
        o.emit(0, "")

    # ---- decoders ------------------------------------------------------------------------
    def dec_len_compact(self, d: int, n: str) -> None:
        o = self.out
        o.emit(d, f"{n} = buf[pos]")
        o.emit(d, f"if {n} < 128: pos += 1")
        o.emit(d, f"else: {n}, pos = {self.ruv}(buf, pos)")

    @property
    def ruv(self) -> str:
        """The runtime's unsigned varint reader for the buffer being decoded."""
        return "_ruv_v" if self.views else "_ruv"

    def piece(self, et: str, raw: str) -> str:
        """A bytes or records value out of the slice ``raw``: a view decoder's ``records`` stay
        a view of the frame, its ``bytes`` (and unknown tags) are copied out as bytes."""
        if self.views and et != "records":
            return f"_bytes({raw})"
        return raw

    def dec_utf8(self, d: int, t: str, raw: str) -> None:
        """Strict UTF-8 first (its fast path takes no error handler), Java's replacement of
        malformed input only when that fails."""
        o = self.out
        o.emit(d, "try:")
        if self.views:  # a memoryview has no decode(); str() takes any buffer
            o.emit(d + 1, f"{t} = _str({raw}, 'utf-8')")
        else:
            o.emit(d + 1, f"{t} = {raw}.decode()")
        o.emit(d, "except UnicodeDecodeError:")
        if self.views:
            o.emit(d + 1, f"{t} = _str({raw}, 'utf-8', 'replace')")
        else:
            o.emit(d + 1, f"{t} = {raw}.decode('utf-8', 'replace')")

    def dec_value(self, d: int, f: FieldSpec, et: str, t: str, v: int, compact: bool, nullable: bool,
                  stack: tuple[StructSpec, ...], n: str | None = None) -> None:
        """Emit code reading one value of type ``et`` into ``t`` (a local or an attribute).

        ``n``: the length of a non-compact string or bytes, already read with the fixed-width
        fields before it."""
        o = self.out
        where = f"{self.msg.name}.{f.name}"
        if et in FIXED_FORMATS:
            st = self.const(struct.Struct(">" + FIXED_FORMATS[et]), "S")
            o.emit(d, f"{t}, = {st}.unpack_from(buf, pos)")
            o.emit(d, f"pos += {FIXED_SIZES[et]}")
        elif et == "uuid":
            u = self.tmp("uu")
            o.emit(d, "if pos + 16 > blen: raise _bad('truncated uuid')")
            o.emit(d, f"{u} = _new(_UUID)")
            o.emit(d, f"_uuid_int({u}, _from_bytes(buf[pos:pos + 16]))")
            o.emit(d, f"_uuid_safe({u}, _UNKNOWN_SAFE)")
            o.emit(d, "pos += 16")
            o.emit(d, f"{t} = {u}")
        elif et in ("string", "bytes", "records") and compact:
            # One-byte lengths (under 127 bytes, not null) are read inline; the rest (null,
            # longer varints, the limits) by the runtime's general reader.
            n = self.tmp("n")
            e = self.tmp("end")
            o.emit(d, f"{n} = buf[pos]")
            o.emit(d, f"if 0 < {n} < 128:")
            o.emit(d + 1, f"{e} = pos + {n}")
            o.emit(d + 1, f"if {e} > blen: raise _bad('{where}: runs past the end')")
            if et == "string":
                self.dec_utf8(d + 1, t, f"buf[pos + 1:{e}]")
            else:
                o.emit(d + 1, f"{t} = {self.piece(et, f'buf[pos + 1:{e}]')}")
            o.emit(d + 1, f"pos = {e}")
            if nullable:
                o.emit(d, f"elif {n} == 0:")
                o.emit(d + 1, f"{t} = None")
                o.emit(d + 1, "pos += 1")
            o.emit(d, "else:")
            reader = "_rcstr" if et == "string" else "_rcbytes"
            if self.views:
                reader = {"string": "_rcstr_v", "bytes": "_rcbytes_v", "records": "_rcrec_v"}[et]
            o.emit(d + 1, f"{t}, pos = {reader}(buf, pos, {nullable}, '{where}')")
        elif et in ("string", "bytes", "records"):
            if n is None:
                n = self.tmp("n")
                if et == "string":
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
                self.dec_utf8(d + 1, t, f"buf[pos:{e}]")
            else:
                o.emit(d + 1, f"{t} = {self.piece(et, f'buf[pos:{e}]')}")
            o.emit(d + 1, f"pos = {e}")
        else:
            sub = f.struct
            assert sub is not None
            if nullable:
                o.emit(d, "if buf[pos] >= 128:")
                o.emit(d + 1, f"{t} = None")
                o.emit(d + 1, "pos += 1")
                o.emit(d, "else:")
                o.emit(d + 1, "pos += 1")
                d += 1
            if self.inline_ok(sub, stack):
                x = t if t.isidentifier() else self.tmp("s")
                self.dec_struct(d, sub, v, x, stack + (sub,))
                if x != t:
                    o.emit(d, f"{t} = {x}")
            else:
                o.emit(d, f"{t}, pos = {self.call_fn('dv' if self.views else 'd', sub, v)}(buf, pos)")

    def dec_field(self, d: int, f: FieldSpec, t: str, v: int, stack: tuple[StructSpec, ...],
                  n: str | None = None) -> None:
        compact = self.flex_of(f, v)
        nullable = v in f.nullable
        o = self.out
        where = f"{self.msg.name}.{f.name}"
        if not f.is_array:
            self.dec_value(d, f, f.type, t, v, compact, nullable, stack, n)
            return
        et = f.element_type
        if n is None:
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
            arr = self.const(_ARRAY_STRUCTS[c], "A")
            o.emit(d, f"{t} = list(({arr}[{n}] if {n} < 64 else _PyStruct('>%d{c}' % {n})).unpack_from(buf, pos))")
            o.emit(d, f"pos += {n} * {FIXED_SIZES[et]}")
        else:
            # ``lst.append(x)`` is specialised by the interpreter; a bound ``append`` is not.
            lst = self.tmp("l")
            el = self.tmp("el")
            o.emit(d, f"{lst} = []")
            o.emit(d, f"for _ in range({n}):")
            self.dec_value(d + 1, f, et, el, v, compact, False, stack)
            o.emit(d + 1, f"{lst}.append({el})")
            o.emit(d, f"{t} = {lst}")

    def dec_struct(self, d: int, s: StructSpec, v: int, ov: str, stack: tuple[StructSpec, ...]) -> None:
        """Emit code reading one struct into the local ``ov``: a bare instance (no ``__init__``
        call) whose slots are assigned as the bytes are read."""
        o = self.out
        flexible = v in self.msg.flexible
        o.emit(d, f"{ov} = _new({self.cls_name(s)})")
        present = [f for f in s.fields if v in f.versions]
        tagged = [f for f in present if v in f.tagged]
        regular = [f for f in present if v not in f.tagged]
        for f in s.fields:
            if v not in f.versions:
                o.emit(d, f"{ov}.{f.attr} = {self.default_expr(f)}")
        group: list[FieldSpec] = []

        def flush(length: str = "") -> str | None:
            """Read the pending fixed-width fields, and with them the next field's length (or
            the tag section's first byte) when ``length`` gives its format."""
            if not group and not length:
                return None
            fmt = ">" + "".join(FIXED_FORMATS[g.type] for g in group) + length
            st = self.const(struct.Struct(fmt), "S")
            targets = [f"{ov}.{g.attr}" for g in group]
            n = None
            if length:
                n = self.tmp("n")
                targets.append(n)
            o.emit(d, f"{', '.join(targets)}, = {st}.unpack_from(buf, pos)")
            o.emit(d, f"pos += {struct.calcsize(fmt)}")
            group.clear()
            return n

        for f in regular:
            if not f.is_array and f.type in FIXED_FORMATS:
                group.append(f)
                continue
            n = None
            if group and not self.flex_of(f, v):
                if f.is_array or f.type in ("bytes", "records"):
                    n = flush("i")
                elif f.type == "string":
                    n = flush("h")
            flush()
            self.dec_field(d, f, f"{ov}.{f.attr}", v, stack, n)
        # An empty tag section (one zero byte) is the usual case: read with the last run of
        # fixed-width fields when there is one, and then a single test.
        first = flush("B") if flexible and group else flush()
        o.emit(d, f"{ov}.unknown_tagged_fields = None")
        if not flexible:
            return
        for f in tagged:
            o.emit(d, f"{ov}.{f.attr} = {self.default_expr(f)}")
        nt, unk, tag, sz, end = (self.tmp(b) for b in ("nt", "unk", "tag", "sz", "end"))
        if first:
            o.emit(d, f"if {first}:")
            o.emit(d + 1, "pos -= 1")
        else:
            o.emit(d, "if buf[pos]:")
        d += 1
        self.dec_len_compact(d, nt)
        o.emit(d, f"if {nt} > blen - pos: raise _bad('{self.msg.name}: too many tagged fields')")
        o.emit(d, f"{unk} = None")
        o.emit(d, f"for _ in range({nt}):")
        o.emit(d + 1, f"{tag}, pos = {self.ruv}(buf, pos)")
        o.emit(d + 1, f"{sz}, pos = {self.ruv}(buf, pos)")
        o.emit(d + 1, f"{end} = pos + {sz}")
        o.emit(d + 1, f"if {end} > blen: raise _bad('{self.msg.name}: tagged field runs past the end')")
        kw = "if"
        for f in sorted(tagged, key=lambda t: t.tag or 0):
            o.emit(d + 1, f"{kw} {tag} == {f.tag}:")
            self.dec_field(d + 2, f, f"{ov}.{f.attr}", v, stack)
            o.emit(d + 2, f"if pos != {end}: raise _bad('{self.msg.name}.{f.name}: tagged field size mismatch')")
            kw = "elif"
        dd = d + 1
        if tagged:
            o.emit(d + 1, "else:")
            dd = d + 2
        o.emit(dd, f"if {unk} is None: {unk} = []")
        o.emit(dd, f"{unk}.append(({tag}, {self.piece('bytes', f'buf[pos:{end}]')}))")
        o.emit(dd, f"pos = {end}")
        o.emit(d, f"{ov}.unknown_tagged_fields = {unk}")
        if not first:
            o.emit(d - 1, "else:")
            o.emit(d, "pos += 1")

    def gen_decoder(self, s: StructSpec, v: int) -> None:
        """``_d_*`` reads bytes; with :attr:`views` set, ``_dv_*`` reads a read-only memoryview
        and leaves ``records`` fields as slices of it (everything else as ``_d_*`` reads it)."""
        o = self.out
        o.emit(0, f"def {self.fn('dv' if self.views else 'd', s, v)}(buf, pos):")
        o.emit(1, "blen = len(buf)")
        self.dec_struct(1, s, v, "o", (s,))
        o.emit(1, "return o, pos")
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
        root = self.msg.root
        for v in versions:
            self.gen_encoder(root, v)
            self.gen_decoder(root, v)
        views = has_view_decoders(self.msg)
        if views:
            self.views = True
            for v in versions:
                self.gen_decoder(root, v)
            self.views = False
        # Standalone coders of nested structs only where inlining stopped (deep or recursive).
        while self._wanted:
            kind, s, v = self._wanted.pop()
            if kind == "e":
                self.gen_encoder(s, v)
            else:
                self.views = kind == "dv"
                self.gen_decoder(s, v)
                self.views = False
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
        if views:
            dv = ", ".join(self.fn("dv", root, v) if v in versions else "None" for v in range(top + 1))
            o.emit(0, f"{name}._view_decoders = ({dv},)")
        if self.msg.type == "header":
            args = ", ".join(self.fn("a", root, v) if v in versions else "None" for v in range(top + 1))
            o.emit(0, f"{name}._arg_encoders = ({args},)")
        for s in structs:
            if s is not root:
                o.emit(0, f"{name}.{s.name} = {self.cls_name(s)}")
        return "\n".join(o.lines) + "\n"


def has_records(s: StructSpec, seen: frozenset[int] = frozenset()) -> bool:
    """Whether ``s`` or a struct in it has a ``records`` field (in any version)."""
    seen = seen | {id(s)}
    return any(f.element_type == "records" or (f.struct is not None and id(f.struct) not in seen and has_records(f.struct, seen))
               for f in s.fields)


def has_view_decoders(msg: MessageSpec) -> bool:
    """View decoders (records as zero-copy slices of the frame) are generated for messages with
    records fields, and for the headers in front of them in a frame."""
    return msg.type == "header" or has_records(msg.root)


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
        "_new": object.__new__,
        "_FileSlice": FileSlice,
        "_put_slice": put_slice,
        "_rcstr": _runtime.read_compact_string,
        "_rcbytes": _runtime.read_compact_bytes,
        "_ruv_v": _runtime.read_uvarint_view,
        "_rcstr_v": _runtime.read_compact_string_view,
        "_rcbytes_v": _runtime.read_compact_bytes_view,
        "_rcrec_v": _runtime.read_compact_records_view,
        "_str": str,
        "_bytes": bytes,
        "_UUID": uuid.UUID,
        "_uuid_int": _UUID_INT_SLOT.__set__,
        "_uuid_safe": _UUID_SAFE_SLOT.__set__,
        "_from_bytes": int.from_bytes,
        "_UNKNOWN_SAFE": uuid.SafeUUID.unknown,
        "_write_unknown": _runtime.write_unknown_tags,
        "_write_tags": _runtime.write_tags,
        "_PyStruct": struct.Struct,
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
