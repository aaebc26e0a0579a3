"""The head's input rules, checked in the driver so bad input is refused before anything is
sent, with the head's field names and rule texts: label keys and values (Kubernetes syntax),
selector expressions (Ray-style label selectors), and resource amounts (fixed point, 1/10000 of a unit)."""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .exceptions import InvalidRequestError

NAME_RULE = ("a name is 1 to 63 characters of letters, digits, '-', '_' and '.', beginning and "
             "ending with a letter or digit")
PREFIX_RULE = ("a prefix is a DNS subdomain of at most 253 characters: lower-case letters, digits, "
               "'-' and '.', each dot-separated part beginning and ending with a letter or digit")
VALUE_RULE = ("a value is empty or 1 to 63 characters of letters, digits, '-', '_' and '.', "
              "beginning and ending with a letter or digit")

# Matched whole (fullmatch): "$" would also match before a trailing newline.
_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
_PREFIX_PART = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")

# The label key the head sets on every actor (its ID); an actor's own labels cannot hold it.
ACTOR_ID = "berth.io/actor-id"

# Resources shared per instance (a fraction of one, or whole instances): the head's GPU rule.
UNIT_INSTANCE = {"GPU"}
# Amounts are whole numbers of 1/10000 (berth-core's quantity.rs): at most 10^14.
UNITS_PER_WHOLE = 10_000
MAX_WHOLE = 10**14
_SUFFIX = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}

# What Rust's str::trim removes: the characters of Unicode's White_Space property (Python's
# str.strip also removes U+001C to U+001F, which the head keeps).
_WHITE_SPACE = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
                "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")


def _trim(text: str) -> str:
    """``text`` without leading and trailing white space, as the head trims it."""
    return text.strip(_WHITE_SPACE)


def is_name(text: str) -> bool:
    return bool(_NAME.fullmatch(text))


def check_key(field: str, key: Any) -> str:
    """A label key: ``[prefix/]name``."""
    if not isinstance(key, str):
        raise InvalidRequestError(field, f"label key {key!r} must be a string")
    rule = None
    if "/" in key:
        prefix, name = key.split("/", 1)
        if not (0 < len(prefix) <= 253 and all(_PREFIX_PART.fullmatch(p) for p in prefix.split("."))):
            rule = PREFIX_RULE
        elif "/" in name or not is_name(name):
            rule = NAME_RULE
    elif not is_name(key):
        rule = NAME_RULE
    if rule:
        raise InvalidRequestError(field, f"label key {_q(key)} is invalid: {rule}")
    return key


def check_value(field: str, key: str, value: Any) -> str:
    """A label value: empty, or a name."""
    if not isinstance(value, str):
        raise InvalidRequestError(field, f"label {_q(key)}: value {value!r} must be a string")
    if value and not is_name(value):
        raise InvalidRequestError(field, f"label {_q(key)}: value {_q(value)} is invalid: {VALUE_RULE}")
    return value


def _q(text: str) -> str:
    """Quoted as the head quotes (Rust's Debug of a string)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def labels(field: str, mapping: Any) -> Dict[str, str]:
    """An actor's labels: a map of label key to value, without ``berth.io/actor-id`` (Berth
    sets it to the actor's ID)."""
    if mapping is None:
        return {}
    if not isinstance(mapping, Mapping):
        raise InvalidRequestError(field, f"must be a dict of label key to value, not {type(mapping).__name__}")
    out = {}
    for key, value in mapping.items():
        check_key(f"{field}.{key}", key)
        out[key] = check_value(f"{field}.{key}", key, value)
        if key == ACTOR_ID:
            raise InvalidRequestError(
                f"{field}.{key}", f"label key {_q(ACTOR_ID)} is set by Berth to the actor's ID and cannot be given")
    return out


# ---------------------------------------------------------------------------------------------
# Selector expressions: "v", "!v", "in(a,b)", "!in(a,b)", "exists()", "!exists()", joined by
# commas (all must hold); operators in any case.


def _split_top_level(text: str) -> List[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "(":
            depth += 1
        elif c == ")":
            if depth == 0:
                raise ValueError("a ')' without its '('")
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth > 0:
        raise ValueError("a '(' is not closed with ')'")
    parts.append(text[start:])
    return parts


def _check_expression_value(value: str) -> None:
    if value and not is_name(value):
        if len(value.encode("utf-8")) > 63:
            raise ValueError(f"value {_q(value)} is longer than 63 characters")
        raise ValueError(f"value {_q(value)} is not a label value (letters, digits, '-', '_' and '.', "
                         "beginning and ending with a letter or digit)")


def _condition(text: str) -> str:
    if not text:
        raise ValueError("an empty condition between commas")
    negated = text.startswith("!")
    if text.startswith("!!"):
        raise ValueError("more than one '!'")
    # After "! ", a second '!' is part of a value (and so not a label value).
    body = text[1:].lstrip(_WHITE_SPACE) if negated else text
    if "(" not in body:
        _check_expression_value(body)
        return ("!" if negated else "") + body
    open_at = body.index("(")
    operator = _trim(body[:open_at])
    operator = operator.lower() if operator.isascii() else operator  # ASCII case only, as the head
    if not body.endswith(")"):
        raise ValueError(f"text after the closing ')' of {operator}(…)")
    inner = body[open_at + 1:-1]
    if "(" in inner or ")" in inner:
        raise ValueError("parentheses inside parentheses")
    if operator == "in":
        if not _trim(inner):
            raise ValueError("in() needs at least one value")
        values: List[str] = []
        for value in (_trim(v) for v in inner.split(",")):
            if not value:
                raise ValueError("an empty value in in(…)")
            _check_expression_value(value)
            if value not in values:
                values.append(value)
        return ("!in(" if negated else "in(") + ",".join(values) + ")"
    if operator == "exists":
        if _trim(inner):
            raise ValueError("exists() takes no values")
        return "!exists()" if negated else "exists()"
    if operator == "":
        raise ValueError("a '(' without an operator; use in(…) or exists()")
    raise ValueError(f"unknown operator {_q(operator)}; use in(…) or exists()")


def expression(field: str, key: str, value: Any) -> str:
    """One selector or toleration expression (a string or an ``In(...)``-style helper), as the
    head's text."""
    if hasattr(value, "to_rest"):
        value = value.to_rest()
    if not isinstance(value, str):
        raise InvalidRequestError(
            field, f"expression {value!r} must be a string (\"v\", \"!v\", \"in(a,b)\", \"exists()\"...) "
                   "or In(...), NotIn(...), Exists(), DoesNotExist()")
    if not _trim(value):
        return ""
    try:
        return ",".join(_condition(_trim(part)) for part in _split_top_level(value))
    except ValueError as e:
        raise InvalidRequestError(field, f"expression {_q(value)} is invalid: {e}") from None


def selector(field: str, mapping: Any) -> Dict[str, str]:
    """A label selector or tolerations: key → expression, every one must hold."""
    if mapping is None:
        return {}
    if not isinstance(mapping, Mapping):
        raise InvalidRequestError(field, f"must be a dict of label key to expression, not {type(mapping).__name__}")
    out = {}
    for key, value in mapping.items():
        sub = f"{field}.{key}" if isinstance(key, str) and is_plain_field(key) else f"{field}.{_q(str(key))}"
        check_key(sub, key)
        out[key] = expression(sub, key, value)
    return out


def is_plain_field(key: str) -> bool:
    """True when the head writes this key bare in a field path (else quoted)."""
    return bool(re.match(r"^[A-Za-z0-9_./-]+$", key))


# ---------------------------------------------------------------------------------------------
# Amounts.


def amount(field: str, name: str, value: Any, *, bundle: bool = False) -> str:
    """A resource amount as the head's decimal text (``"0.5"``, ``"16Gi"``), checked as the head
    checks it (berth-core's ``Quantity``: exact to 0.0001, never rounded, at most 10^14)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)):
        raise InvalidRequestError(field, f"{value!r} is not a decimal number (expected e.g. 2, 0.5 or \"16Gi\")")
    if isinstance(value, (float, Decimal)):
        # is_finite first: comparing a signalling NaN raises.
        if not (value.is_finite() if isinstance(value, Decimal) else math.isfinite(value)):
            raise InvalidRequestError(field, f"{value} is not a finite number")
        if value == 0:
            return "0"  # also -0.0
        if value < 0:
            raise InvalidRequestError(field, f"{value} is negative; amounts must be 0 or more")
        # A float's shortest decimal (repr) is what was written: 0.1 stays 0.1, 1e-05 is 0.00001.
        exact = Decimal(repr(value)) if isinstance(value, float) else value
        # Judged by its exponent before it is written out: 1E+50000000 is never expanded.
        if exact.adjusted() > 14:
            raise InvalidRequestError(field, f"{value} is larger than the maximum amount 100000000000000 (1e14)")
        if exact.adjusted() < -30:
            raise InvalidRequestError(
                field, f"{value} is below the resolution of 0.0001; the smallest non-zero amount is 0.0001")
        text = format(exact, "f")
    elif isinstance(value, int):
        if value < 0:
            raise InvalidRequestError(field, f"{value} is negative; amounts must be 0 or more")
        if value > MAX_WHOLE:
            # str() of a very large int is refused by Python itself (and would be long).
            shown = str(value) if value.bit_length() <= 256 else f"an integer of {value.bit_length()} bits"
            raise InvalidRequestError(field, f"{shown} is larger than the maximum amount 100000000000000 (1e14)")
        text = str(value)
    else:
        text = value
    units, rule = _units(text)
    if rule is not None:
        raise InvalidRequestError(field, rule)
    assert units is not None
    text = _trim(text)
    if name in UNIT_INSTANCE and units > UNITS_PER_WHOLE and units % UNITS_PER_WHOLE:
        what = "a bundle asks for a share below 1 or whole instances" if bundle else \
            "a request must be below 1 (a share of one instance) or a whole number of instances"
        raise InvalidRequestError(field, f"{text} is not allowed: {name} is shared per instance, so {what}")
    return text


def _units(text: str) -> Tuple[Optional[int], Optional[str]]:
    """``text`` in units of 1/10000, or the rule it breaks: berth-core's ``Quantity::parse``,
    step by step, so that each input is refused for the same reason."""
    trimmed = _trim(text)
    if trimmed.startswith("-"):
        return None, f"{trimmed} is negative; amounts must be 0 or more"
    malformed = f"{_q(text)} is not a decimal number (expected e.g. 2, 0.5 or \"16Gi\")"
    end = next((i for i, c in enumerate(trimmed) if c not in "0123456789."), len(trimmed))
    number, suffix = trimmed[:end], trimmed[end:]
    if suffix not in _SUFFIX:
        return None, malformed
    int_part, dot, frac_part = number.partition(".")
    if not int_part or "." in frac_part or (dot and not frac_part):
        return None, malformed
    int_part, frac_part = int_part.lstrip("0"), frac_part.rstrip("0")
    overflow = (None, f"{trimmed} is larger than the maximum amount 100000000000000 (1e14)")
    below = (None, f"{trimmed} is below the resolution of 0.0001; the smallest non-zero amount is 0.0001")
    too_precise = (None, f"{trimmed} has more than 4 decimal places; amounts are exact to 0.0001 and are not rounded")
    max_units = MAX_WHOLE * UNITS_PER_WHOLE
    # Size before precision: a number too large is reported as such.
    if len(int_part) > 20:
        return overflow
    units_per_whole = _SUFFIX[suffix] * UNITS_PER_WHOLE
    int_value = int(int_part or "0")
    int_units = int_value * units_per_whole
    if int_units > max_units:
        return overflow
    if len(frac_part) > 30:
        tiny = not int_part and set(frac_part[:30]) == {"0"}
        return below if tiny else too_precise
    frac_units = 0
    if frac_part:
        num, den = int(frac_part), 10 ** len(frac_part)
        common = math.gcd(num, den)
        num, den = num // common, den // common
        if units_per_whole % den:
            return below if int_value == 0 and num * units_per_whole < den else too_precise
        frac_units = num * (units_per_whole // den)
    units = int_units + frac_units
    if units > max_units:
        return overflow
    return units, None


_RESOURCE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./:-]{0,252}")


def resource_name(field: str, name: Any) -> str:
    """A resource name: 1 to 253 letters, digits, '-', '_', '.', '/' and ':', starting with a
    letter or digit (``CPU``, ``nvidia.com/t4``)."""
    if not isinstance(name, str) or not _RESOURCE.fullmatch(name):
        raise InvalidRequestError(
            field, f"resource name {name!r} is invalid: 1 to 253 characters of letters, digits, '-', '_', "
                   "'.', '/' and ':', starting with a letter or digit")
    return name
