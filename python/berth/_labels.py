"""The head's input rules, checked in the driver so bad input is refused before anything is
sent, with the head's field names and rule texts: label keys and values (Kubernetes syntax),
selector expressions (seed 003), and resource amounts (fixed point, 1/10000 of a unit)."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any, Dict, List, Mapping

from .exceptions import InvalidRequestError

NAME_RULE = ("a name is 1 to 63 characters of letters, digits, '-', '_' and '.', beginning and "
             "ending with a letter or digit")
PREFIX_RULE = ("a prefix is a DNS subdomain of at most 253 characters: lower-case letters, digits, "
               "'-' and '.', each dot-separated part beginning and ending with a letter or digit")
VALUE_RULE = ("a value is empty or 1 to 63 characters of letters, digits, '-', '_' and '.', "
              "beginning and ending with a letter or digit")

_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
_PREFIX_PART = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")

# Resources shared per instance (a fraction of one, or whole instances): the head's GPU rule.
UNIT_INSTANCE = {"GPU"}
_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
MAX_AMOUNT = Decimal(10) ** 14
_AMOUNT = re.compile(r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([kMGTPE]i?)?$")


def is_name(text: str) -> bool:
    return bool(_NAME.match(text))


def check_key(field: str, key: Any) -> str:
    """A label key: ``[prefix/]name``."""
    if not isinstance(key, str):
        raise InvalidRequestError(field, f"label key {key!r} must be a string")
    rule = None
    if "/" in key:
        prefix, name = key.split("/", 1)
        if not (0 < len(prefix) <= 253 and all(_PREFIX_PART.match(p) for p in prefix.split("."))):
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
    """A map of label key to value."""
    if mapping is None:
        return {}
    if not isinstance(mapping, Mapping):
        raise InvalidRequestError(field, f"must be a dict of label key to value, not {type(mapping).__name__}")
    out = {}
    for key, value in mapping.items():
        check_key(f"{field}.{key}", key)
        out[key] = check_value(f"{field}.{key}", key, value)
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
        if len(value) > 63:
            raise ValueError(f"value {_q(value)} is longer than 63 characters")
        raise ValueError(f"value {_q(value)} is not a label value (letters, digits, '-', '_' and '.', "
                         "beginning and ending with a letter or digit)")


def _condition(text: str) -> str:
    if not text:
        raise ValueError("an empty condition between commas")
    negated = text.startswith("!")
    body = text[1:].lstrip() if negated else text
    if negated and body.startswith("!"):
        raise ValueError("more than one '!'")
    if "(" not in body:
        _check_expression_value(body)
        return ("!" if negated else "") + body
    open_at = body.index("(")
    operator = body[:open_at].strip().lower()
    if not body.endswith(")"):
        raise ValueError(f"text after the closing ')' of {operator}(…)")
    inner = body[open_at + 1:-1]
    if "(" in inner or ")" in inner:
        raise ValueError("parentheses inside parentheses")
    if operator == "in":
        if not inner.strip():
            raise ValueError("in() needs at least one value")
        values: List[str] = []
        for value in (v.strip() for v in inner.split(",")):
            if not value:
                raise ValueError("an empty value in in(…)")
            _check_expression_value(value)
            if value not in values:
                values.append(value)
        return ("!in(" if negated else "in(") + ",".join(values) + ")"
    if operator == "exists":
        if inner.strip():
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
    if not value.strip():
        return ""
    try:
        return ",".join(_condition(part.strip()) for part in _split_top_level(value))
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
    checks it."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)):
        raise InvalidRequestError(field, f"{value!r} is not a decimal number (expected e.g. 2, 0.5 or \"16Gi\")")
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidRequestError(field, f"{value} is not a finite number")
        text = repr(value)
        if "e" in text or "E" in text:
            text = format(Decimal(value).normalize(), "f")
    else:
        text = str(value).strip()
    if text.startswith("-"):
        raise InvalidRequestError(field, f"{text} is negative; amounts must be 0 or more")
    match = _AMOUNT.match(text)
    if not match:
        raise InvalidRequestError(field, f"{_q(text)} is not a decimal number (expected e.g. 2, 0.5 or \"16Gi\")")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        quantity = Decimal(number) * _SUFFIX[suffix]
    except InvalidOperation:
        raise InvalidRequestError(field, f"{_q(text)} is not a decimal number") from None
    if quantity > MAX_AMOUNT:
        raise InvalidRequestError(field, f"{text} is more than the largest amount, 10^14")
    if quantity != quantity.quantize(Decimal("0.0001")) and not suffix:
        raise InvalidRequestError(
            field, f"{text} has more than 4 decimal places; amounts are exact to 0.0001 and are not rounded")
    if name in UNIT_INSTANCE and not (quantity < 1 or quantity == quantity.to_integral_value()):
        what = "a bundle asks for a share below 1 or whole instances" if bundle else \
            "a request must be below 1 (a share of one instance) or a whole number of instances"
        raise InvalidRequestError(field, f"{text} is not allowed: {name} is shared per instance, so {what}")
    return text


_RESOURCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./:-]{0,252}$")


def resource_name(field: str, name: Any) -> str:
    """A resource name: 1 to 253 letters, digits, '-', '_', '.', '/' and ':', starting with a
    letter or digit (``CPU``, ``nvidia.com/t4``)."""
    if not isinstance(name, str) or not _RESOURCE.match(name):
        raise InvalidRequestError(
            field, f"resource name {name!r} is invalid: 1 to 253 characters of letters, digits, '-', '_', "
                   "'.', '/' and ':', starting with a letter or digit")
    return name
