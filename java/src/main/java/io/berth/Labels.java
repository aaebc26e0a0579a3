package io.berth;

import java.util.Map;
import java.util.regex.Pattern;

/** The head's label rules (Kubernetes syntax), checked before anything is sent. */
final class Labels {
  private static final Pattern NAME = Pattern.compile("^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$");
  private static final Pattern PREFIX_PART = Pattern.compile("^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$");
  static final String NAME_RULE = "a name is 1 to 63 characters of letters, digits, '-', '_' and '.', "
      + "beginning and ending with a letter or digit";
  static final String VALUE_RULE = "a value is empty or 1 to 63 characters of letters, digits, '-', '_' "
      + "and '.', beginning and ending with a letter or digit";

  private Labels() {}

  static void checkKey(String field, String key) {
    boolean ok;
    if (key == null) {
      ok = false;
    } else if (key.contains("/")) {
      String prefix = key.substring(0, key.indexOf('/'));
      String name = key.substring(key.indexOf('/') + 1);
      ok = !prefix.isEmpty() && prefix.length() <= 253 && !name.contains("/") && NAME.matcher(name).matches();
      for (String part : prefix.split("\\.", -1)) {
        ok &= PREFIX_PART.matcher(part).matches();
      }
    } else {
      ok = NAME.matcher(key).matches();
    }
    if (!ok) {
      throw new BerthException(field, "label key \"" + key + "\" is invalid: " + NAME_RULE, null);
    }
  }

  static void checkValue(String field, String key, String value) {
    if (value == null || !(value.isEmpty() || NAME.matcher(value).matches())) {
      throw new BerthException(
          field, "label \"" + key + "\": value \"" + value + "\" is invalid: " + VALUE_RULE, null);
    }
  }

  static void checkLabels(String field, Map<String, String> labels) {
    if (labels == null) {
      return;
    }
    labels.forEach((k, v) -> {
      checkKey(field + "." + k, k);
      checkValue(field + "." + k, k, v);
    });
  }

  /** A selector or tolerations: each key and each expression (seed 003's grammar). */
  static void checkSelector(String field, Map<String, String> selector) {
    if (selector == null) {
      return;
    }
    selector.forEach((k, v) -> {
      checkKey(field + "." + k, k);
      String rule = expressionRule(v);
      if (rule != null) {
        throw new BerthException(field + "." + k, "expression \"" + v + "\" is invalid: " + rule, null);
      }
    });
  }

  /**
   * Why {@code text} is not an expression ({@code v}, {@code !v}, {@code in(a,b)},
   * {@code !in(a,b)}, {@code exists()}, {@code !exists()}, joined by commas), or null; the head's
   * rules and words.
   */
  static String expressionRule(String text) {
    if (text == null) {
      return "an expression is a string";
    }
    if (text.isBlank()) {
      return null;
    }
    var parts = new java.util.ArrayList<String>();
    int depth = 0;
    int start = 0;
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c == '(') {
        depth++;
      } else if (c == ')') {
        if (depth == 0) {
          return "a ')' without its '('";
        }
        depth--;
      } else if (c == ',' && depth == 0) {
        parts.add(text.substring(start, i));
        start = i + 1;
      }
    }
    if (depth > 0) {
      return "a '(' is not closed with ')'";
    }
    parts.add(text.substring(start));
    for (String part : parts) {
      String rule = conditionRule(part.trim());
      if (rule != null) {
        return rule;
      }
    }
    return null;
  }

  private static String conditionRule(String text) {
    if (text.isEmpty()) {
      return "an empty condition between commas";
    }
    String body = text.startsWith("!") ? text.substring(1).stripLeading() : text;
    if (text.startsWith("!") && body.startsWith("!")) {
      return "more than one '!'";
    }
    int open = body.indexOf('(');
    if (open < 0) {
      return valueRule(body);
    }
    String operator = body.substring(0, open).trim().toLowerCase(java.util.Locale.ROOT);
    if (!body.endsWith(")")) {
      return "text after the closing ')' of " + operator + "(…)";
    }
    String inner = body.substring(open + 1, body.length() - 1);
    if (inner.contains("(") || inner.contains(")")) {
      return "parentheses inside parentheses";
    }
    switch (operator) {
      case "in":
        if (inner.isBlank()) {
          return "in() needs at least one value";
        }
        for (String value : inner.split(",", -1)) {
          if (value.trim().isEmpty()) {
            return "an empty value in in(…)";
          }
          String rule = valueRule(value.trim());
          if (rule != null) {
            return rule;
          }
        }
        return null;
      case "exists":
        return inner.isBlank() ? null : "exists() takes no values";
      case "":
        return "a '(' without an operator; use in(…) or exists()";
      default:
        return "unknown operator \"" + operator + "\"; use in(…) or exists()";
    }
  }

  private static String valueRule(String value) {
    if (value.isEmpty() || NAME.matcher(value).matches()) {
      return null;
    }
    if (value.length() > 63) {
      return "value \"" + value + "\" is longer than 63 characters";
    }
    return "value \"" + value + "\" is not a label value (letters, digits, '-', '_' and '.', beginning and "
        + "ending with a letter or digit)";
  }
}
