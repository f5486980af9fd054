"""Checking and rendering the OpenCL C expressions of a model.

An expression is tokenized; every identifier must be a known name (the
context's variables and parameters, ``t`` where allowed, the OpenCL math
built-ins and constants) and the text may hold only arithmetic, comparisons,
the conditional operator and calls: no statements, assignments, braces or
comments can get into the kernel through it.
"""

from __future__ import annotations

import difflib
import math
import re
from typing import Any

import numpy as np

# OpenCL C math, common and relational built-ins usable on real_t scalars.
MATH_BUILTINS = frozenset("""
acos acosh acospi asin asinh asinpi atan atan2 atanh atanpi atan2pi cbrt ceil copysign cos
cosh cospi erfc erf exp exp2 exp10 expm1 fabs fdim floor fma fmax fmin fmod hypot ldexp lgamma
log log2 log10 log1p logb mad maxmag minmag nextafter pow pown powr remainder rint rootn round
rsqrt sin sinh sinpi sqrt tan tanh tanpi tgamma trunc clamp degrees max min mix radians step
smoothstep sign select isnan isinf isfinite signbit
native_cos native_divide native_exp native_exp2 native_exp10 native_log native_log2
native_log10 native_powr native_recip native_rsqrt native_sin native_sqrt native_tan
half_cos half_exp half_log half_sin half_sqrt half_tan
""".split())

# Float constants of OpenCL C and their double twins.
FLOAT_CONSTANTS = {
    "M_E_F": "M_E", "M_LOG2E_F": "M_LOG2E", "M_LOG10E_F": "M_LOG10E", "M_LN2_F": "M_LN2",
    "M_LN10_F": "M_LN10", "M_PI_F": "M_PI", "M_PI_2_F": "M_PI_2", "M_PI_4_F": "M_PI_4",
    "M_1_PI_F": "M_1_PI", "M_2_PI_F": "M_2_PI", "M_2_SQRTPI_F": "M_2_SQRTPI",
    "M_SQRT2_F": "M_SQRT2", "M_SQRT1_2_F": "M_SQRT1_2",
}
CONSTANTS = frozenset(FLOAT_CONSTANTS) | frozenset(FLOAT_CONSTANTS.values()) | {"MAXFLOAT", "INFINITY"}
CASTS = frozenset({"real_t", "int", "uint"})

_C_KEYWORDS = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline
int long register restrict return short signed sizeof static struct switch typedef union
unsigned void volatile while bool half size_t ptrdiff_t uchar ushort uint ulong kernel global
local constant private read_only write_only __kernel __global __local __constant __private
true false real_t acc_t unwrap displacement dt
""".split())

RESERVED = _C_KEYWORDS | MATH_BUILTINS | CONSTANTS | CASTS | {"t"}

_TOKEN = re.compile(r"""
    (?P<num>0[xX][0-9a-fA-F]+[uUlL]*|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[fFuUlL]?)
  | (?P<name>[A-Za-z_]\w*)
  | (?P<op>==|!=|<=|>=|&&|\|\||<<|>>|[-+*/%()<>!?:,&|^~])
  | (?P<ws>\s+)
""", re.X)

_RESERVED_PREFIXES = ("sde_", "kur_", "_", "get_", "barrier", "atomic_", "atom_", "convert_",
                      "as_", "vload", "vstore", "async_", "mem_fence")
_IDENT = re.compile(r"[A-Za-z_]\w*\Z")


def check_name(kind: str, name) -> str:
    """A user-chosen variable/parameter/noise-source name: a C identifier that
    is not reserved and does not start with the kernel's internal prefix."""
    if not isinstance(name, str) or not _IDENT.match(name):
        raise ValueError(f"{kind} name {name!r} is not a C identifier "
                         "(letters, digits and _, not starting with a digit)")
    if name in RESERVED or name.startswith(_RESERVED_PREFIXES):
        raise ValueError(f"{kind} name {name!r} is reserved (an OpenCL keyword, built-in or "
                         "constant, 't', 'dt', 'unwrap', 'displacement', or it starts with one of "
                         f"{', '.join(_RESERVED_PREFIXES)})")
    return name


def as_text(where: str, text) -> str:
    """An expression given as a string or a finite number, as a string."""
    if isinstance(text, (int, float, np.integer, np.floating)) and not isinstance(text, bool):
        if not math.isfinite(float(text)):
            raise ValueError(f"{where}: {text!r} is not finite")
        return repr(float(text))
    if not isinstance(text, str):
        raise TypeError(f"{where} must be a string (an OpenCL C expression) or a number, "
                        f"got {type(text).__name__}")
    return text


def tokenize(where: str, text) -> list[tuple[str, str]]:
    """[(kind, text)] with kind in num/name/op; ValueError naming `where` on
    any character that cannot be part of an expression."""
    text = as_text(where, text)
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"{where}: unexpected character {text[pos]!r} at position {pos} "
                             f"in {text!r}; expressions may use numbers, names, arithmetic, "
                             "comparisons, ?: and function calls only")
        kind = m.lastgroup
        assert kind is not None         # every alternative of _TOKEN is a named group
        if kind != "ws":
            out.append((kind, m.group()))
        pos = m.end()
    if not out:
        raise ValueError(f"{where}: empty expression")
    return out


# Observable-only functions of one variable: unwrap(x) = x + laps * period (the
# continuous position of a periodic variable); displacement(x) = position now
# minus position at the ensemble's origin (see Ensemble.set_origin).
VARIABLE_FUNCTIONS = ("unwrap", "displacement")


def check(where: str, text, names: dict[str, str], allow_t=True, unwrap=None,
          displacement=None) -> list[tuple[str, str]]:
    """Tokens of `text` after checking every identifier against `names`
    ({name: what it is}), ``t`` (if allow_t), the built-ins, constants and
    casts. ``unwrap(v)`` is accepted when `unwrap` (the periodic variables)
    is not None and v is one of them; ``displacement(v)`` likewise for the
    variables in `displacement`."""
    toks = tokenize(where, text)
    allowed = {"unwrap": (unwrap, "periodic variable"), "displacement": (displacement, "variable")}
    depth = 0
    for i, (kind, tok) in enumerate(toks):
        nxt = toks[i + 1][1] if i + 1 < len(toks) else ""
        prev = toks[i - 1][1] if i else ""
        if kind == "name":
            if tok in allowed:
                vars_ok, what = allowed[tok]
                if vars_ok is None:
                    raise ValueError(f"{where}: {tok}(v) is allowed in observables only")
                ok = (i + 3 < len(toks) and nxt == "(" and toks[i + 2][1] in vars_ok
                      and toks[i + 3][1] == ")")
                if not ok:
                    raise ValueError(f"{where}: {tok}(v) takes one {what} ("
                                     + (", ".join(vars_ok) or "this model has none") + ")")
            elif tok in MATH_BUILTINS:
                if nxt != "(":
                    raise ValueError(f"{where}: {tok} is a function; call it as {tok}(...)")
            elif tok in CASTS:
                if prev != "(" or nxt != ")":
                    raise ValueError(f"{where}: {tok} may appear only in a cast like ({tok})x")
            elif (tok == "t" and allow_t) or tok in names or tok in CONSTANTS:
                if nxt == "(":
                    raise ValueError(f"{where}: {tok} is not a function")
            else:
                raise ValueError(_unknown(where, tok, text, names, allow_t))
        elif tok == "(":
            depth += 1
        elif tok == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"{where}: unbalanced ')' in {text!r}")
        elif tok == "," and depth == 0:
            raise ValueError(f"{where}: ',' outside a function call in {text!r}")
        elif tok in ("/", "*") and nxt in ("/", "*"):
            raise ValueError(f"{where}: unexpected character {nxt!r} after {tok!r} (no comments) in {text!r}")
        if kind in ("num", "name") and i + 1 < len(toks) and toks[i + 1][0] in ("num", "name"):
            raise ValueError(f"{where}: missing operator between {tok!r} and {nxt!r} in {text!r}")
        # an operator, '(' or ',' needs an operand after it
        if kind == "op" and tok != ")" and nxt in ("", ")", ",", "?", ":"):
            raise ValueError(f"{where}: an operand is missing after {tok!r} in {text!r}")
        # an operand ends with a number, a name or ')'; a new one may not follow it
        # directly, except after a cast's ')' and a function name's '('
        cast_close = tok == ")" and i >= 2 and toks[i - 1][1] in CASTS and toks[i - 2][1] == "("
        if ((kind == "num" and nxt == "(")
                or (tok == ")" and not cast_close and i + 1 < len(toks)
                    and (toks[i + 1][0] in ("num", "name") or nxt == "("))):
            raise ValueError(f"{where}: missing operator between {tok!r} and {nxt!r} in {text!r}")
    if depth != 0:
        raise ValueError(f"{where}: unbalanced '(' in {text!r}")
    return toks


def _unknown(where: str, tok: str, text: str, names: dict[str, str], allow_t: bool) -> str:
    groups: dict[str, list[str]] = {}
    for n, what in names.items():
        groups.setdefault(what, []).append(n)
    known = [f"{what}s: {', '.join(ns)}" for what, ns in groups.items()]
    if allow_t:
        known.append("time: t")
    known.append("constants: " + ", ".join(sorted(FLOAT_CONSTANTS)))
    known.append("and the OpenCL math built-ins (sin, cos, exp, log, sqrt, pow, fabs, ...)")
    close = difflib.get_close_matches(tok, list(names) + sorted(MATH_BUILTINS | CONSTANTS)
                                      + (["t"] if allow_t else []), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{where}: unknown name {tok!r} in {text!r}{hint}. Known names: " + "; ".join(known)


def render(toks, real: str, rename=None) -> str:
    """OpenCL C text of checked tokens: float constants become their double
    twins when real is double, `rename` maps names and the calls
    (function, variable) of VARIABLE_FUNCTIONS, and
    the whole is parenthesized."""
    rename = rename or {}
    out = []
    i = 0
    while i < len(toks):
        kind, tok = toks[i]
        if tok in VARIABLE_FUNCTIONS and kind == "name":
            out.append(rename[(tok, toks[i + 2][1])])
            i += 4
            continue
        if kind == "name" and real == "double" and tok in FLOAT_CONSTANTS:
            tok = FLOAT_CONSTANTS[tok]
        out.append(rename.get(tok, tok))
        i += 1
    return "(" + " ".join(out) + ")"


# Host evaluation (drive period): the NumPy twin of the built-ins it allows.
_HOST_FUNCS = {
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "fabs": np.abs, "pow": np.power, "powr": np.power, "floor": np.floor, "ceil": np.ceil,
    "fmin": np.fmin, "fmax": np.fmax, "min": np.minimum, "max": np.maximum, "atan": np.arctan,
    "atan2": np.arctan2, "cbrt": np.cbrt, "hypot": np.hypot, "exp2": np.exp2, "log2": np.log2,
    "log10": np.log10, "rsqrt": lambda x: 1.0 / np.sqrt(x),
}
_HOST_CONSTS = {"M_E": math.e, "M_LOG2E": math.log2(math.e), "M_LOG10E": math.log10(math.e),
                "M_LN2": math.log(2), "M_LN10": math.log(10), "M_PI": math.pi,
                "M_PI_2": math.pi / 2, "M_PI_4": math.pi / 4, "M_1_PI": 1 / math.pi,
                "M_2_PI": 2 / math.pi, "M_2_SQRTPI": 2 / math.sqrt(math.pi),
                "M_SQRT2": math.sqrt(2), "M_SQRT1_2": math.sqrt(0.5)}


def host_eval(where: str, toks, values: dict) -> np.ndarray:
    """Evaluate checked tokens on the host in float64 (real division), with
    `values` for the names; only arithmetic and _HOST_FUNCS."""
    parts = []
    ns: dict[str, Any] = {}
    for kind, tok in toks:
        if kind == "num":
            parts.append(repr(float(int(tok, 0))) if tok[:2].lower() == "0x"
                         else tok.rstrip("fFuUlL") or tok)
        elif kind == "name":
            if tok in values:
                ns[tok] = np.asarray(values[tok], dtype=float)
            elif tok in _HOST_FUNCS:
                ns[tok] = _HOST_FUNCS[tok]
            elif tok in _HOST_CONSTS or FLOAT_CONSTANTS.get(tok, "") in _HOST_CONSTS:
                ns[tok] = _HOST_CONSTS[tok] if tok in _HOST_CONSTS else _HOST_CONSTS[FLOAT_CONSTANTS[tok]]
            else:
                raise ValueError(f"{where}: {tok!r} cannot be evaluated on the host; use "
                                 f"arithmetic, parameters and {', '.join(sorted(_HOST_FUNCS))}")
            parts.append(tok)
        else:
            if tok in ("?", ":", "&&", "||", "!", "<<", ">>", "&", "|", "^", "~", "%"):
                raise ValueError(f"{where}: operator {tok!r} is not supported here")
            parts.append(tok)
    with np.errstate(all="ignore"):
        return np.asarray(eval(" ".join(parts), {"__builtins__": {}}, ns), dtype=float)
